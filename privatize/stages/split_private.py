"""``split_private``: the CRT routing flag ``private`` from the flags earlier stages
recorded (``dedup_hit``, ``pi_hit``, ``pi_c_hit``), never from searching the text for
``<MASK>``. D_pri = records with any flag; D_pub = the rest."""

from __future__ import annotations

from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from privatize.errors import SpecError
from privatize.settings import StageSettings
from privatize.stage import Stage, register_stage, set_column

FLAGS = ("dedup_hit", "pi_hit", "pi_c_hit")


class SplitPrivateSettings(StageSettings):
    kind: Literal["split_private"] = "split_private"
    flags: list[Literal["dedup_hit", "pi_hit", "pi_c_hit"]] | None = None
    """Flags to route by; by default every one an earlier stage recorded."""


@register_stage("split_private", SplitPrivateSettings)
class SplitPrivate(Stage):
    def process_batch(self, batch: pa.Table) -> pa.Table:
        wanted = self.settings.flags or [f for f in FLAGS if f in batch.column_names]
        missing = [f for f in wanted if f not in batch.column_names]
        if missing or not wanted:
            raise SpecError(f"split_private: flag column(s) {missing or list(FLAGS)} not recorded by an earlier stage")
        private = pc.fill_null(batch[wanted[0]], False)
        for f in wanted[1:]:
            private = pc.or_(private, pc.fill_null(batch[f], False))
        batch = set_column(batch, "private", private)
        batch = set_column(batch, "_stat.private", pc.cast(private, pa.int64()))
        return set_column(batch, "_stat.public", pc.cast(pc.invert(private), pa.int64()))
