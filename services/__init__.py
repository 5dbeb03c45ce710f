"""The FastAPI control plane (tenants, uploads, keys, jobs). Not built yet (a later
issue); the package exists so the distribution's layout is fixed. It submits the
entrypoints of ``privatize``, ``train`` and ``attacks``; nothing imports it."""
