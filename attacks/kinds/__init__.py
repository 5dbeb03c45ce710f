"""The papers' attacks, one module each (found by :data:`attacks.registry.ATTACKS` on its
first lookup, as ``privatize.stages`` are): each holds its settings (the config's
``attacks`` entry and its older named section), its run, its typed result
(``attacks.results``) and its rows of a model's privacy card. Modules whose name starts
with ``_`` are shared parts, not attacks."""
