"""The control plane: a multi-tenant FastAPI service for corpus uploads, keys,
privatization jobs, trainings and evaluations on Ray. It holds no privatization, training
or attack logic of its own: it validates, stores, records and submits the entrypoints of
``privatize``, ``train`` and ``attacks`` as Ray Jobs.

Where things live:

* ``app`` – the app factory, error-to-status mapping, startup and the reconciler task;
* ``api``, ``routes/`` – the ``/v1`` routes and their schemas (adding an endpoint: see its
  docstring); ``routes/kinds`` generates each job kind's resource;
* ``settings`` – pydantic-settings, the one place that reads the environment;
* ``models``, ``db``, ``migrations/`` – SQLAlchemy 2 models, engine, Alembic revisions;
* ``storage`` – ``pyarrow.fs`` storage (local directory or ``s3://``) and its layout;
* ``tenants`` – tenants and API tokens (hash-only);
* ``corpora``, ``validation`` – streamed uploads and their validation;
* ``keys``, ``envelope``, ``keystore`` – tenants' keys sealed under the master key, and
  the ``keystore:`` backend that Ray workers install;
* ``specs``, ``jobs``, ``raycluster``, ``jobrun`` – spec checks, job submission and
  reconciliation, the embedded Ray head, the Ray Jobs entrypoint;
* ``jobkinds`` – the ``JobKind`` base and registry; its kinds, one class each with what is
  particular to it (validation, quotas, results, its ``Out`` model and routes):
  ``specs`` (privatize), ``trainings``, ``evaluations``;
* ``cli``, ``admin``, ``client`` – ``privatize serve|submit|models|admin`` and an HTTP
  client.

Nothing in ``privatize``, ``train`` or ``attacks`` imports this package.
"""
