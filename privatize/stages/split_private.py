"""``split_private``: the CRT routing flag (paper 004, Algorithm 1).

``private`` = OR of the flags earlier stages recorded: ``dedup_hit`` (``dedup``: the
record repeats an earlier one and was masked), ``pi_hit`` (``redact``: policy pi removed
something), ``mask_hit`` (``mask``: a word was masked) and ``pi_c_hit`` (``redact``: the conservative policy pi_c did not call the
record clean). D_pri = records with ``private`` true, trained with DP-SGD; D_pub = the
rest, trained with plain SGD.

The text is never searched for ``<MASK>``: a mask token that was in the input, or one
a stage put there without flagging, must not change the routing, and a flag is the
stage's own statement of what it did.

Settings: ``flags``, the flags to route by; by default every one of them that an
earlier stage recorded. A flag that is named but absent, or no flag at all, is an error
(the spec validator already refuses a ``split_private`` with no ``dedup`` or ``redact``
before it). A null flag counts as false.

Statistics: ``_stat.private`` and ``_stat.public`` (one of them is 1 on every row).
"""

from __future__ import annotations

from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from privatize.errors import SpecError
from privatize.settings import AfterOneOf, StageSettings
from privatize.stage import Stage, register_stage, set_column

FLAGS = ("dedup_hit", "pi_hit", "pi_c_hit", "mask_hit")
Flag = Literal["dedup_hit", "pi_hit", "pi_c_hit", "mask_hit"]


class SplitPrivateSettings(StageSettings):
    kind: Literal["split_private"] = "split_private"
    order_rules = (AfterOneOf(("dedup", "redact", "mask"), "split_private needs a dedup, redact or mask stage "
                                                           "before it (it routes by their flags)"),)
    flags: list[Flag] | None = Field(None, min_length=1)
    """Flags to route by; by default every one an earlier stage recorded."""


@register_stage("split_private", SplitPrivateSettings)
class SplitPrivate(Stage):
    def process_batch(self, batch: pa.Table) -> pa.Table:
        present = [f for f in FLAGS if f in batch.column_names]
        wanted = list(self.settings.flags) if self.settings.flags else present
        missing = [f for f in wanted if f not in batch.column_names]
        if missing:
            raise SpecError(f"split_private: flag column(s) {missing} not recorded by any earlier stage "
                            f"(recorded: {present or 'none'}); add the stage that records them before split_private")
        if not wanted:
            raise SpecError(f"split_private: none of the flags {list(FLAGS)} was recorded; "
                            "put dedup or redact before split_private")
        private = None
        for f in wanted:
            flag = pc.fill_null(pc.cast(batch[f], pa.bool_()), False)
            private = flag if private is None else pc.or_(private, flag)
        batch = set_column(batch, "private", private)
        batch = set_column(batch, "_stat.private", pc.cast(private, pa.int64()))
        return set_column(batch, "_stat.public", pc.cast(pc.invert(private), pa.int64()))
