"""One rank of the book-keeping DDP test (tests/train/test_train_units.py): a process
group over gloo, the tiny model in DDP, book-keeping DP-SGD steps on this rank's half of
each batch; writes the final parameters to ``OUT``.

    python tests/train/bk_ddp_worker.py RANK WORLD PORT OUT
"""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist

rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
torch.set_num_threads(1)
dist.init_process_group("gloo", rank=rank, world_size=world)

from train.batches import make_batch  # noqa: E402
from train.dp.engine import make_private  # noqa: E402
from train.loop import train_step  # noqa: E402
from train.models import build_model, preset_config  # noqa: E402

model = build_model(preset_config("tiny", vocab_size=300, bos_token_id=0, eos_token_id=0, pad_token_id=1), 0)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(1)
dp = make_private(ddp, opt, grad_sample_mode="bk", max_grad_norm=float(os.environ.get("CLIP", "1e6")),
                  noise_multiplier=0.0, accountant="prv", sample_rate=0.25, expected_batch_size=4 / world,
                  distributed=True, generator=gen)
rng = np.random.default_rng(0)
ids = rng.integers(2, 300, size=(12, 16)).astype(np.int32)
loss = (rng.random((12, 16)) > 0.1).astype(np.uint8)
for k in range(3):
    x, y = make_batch(ids, loss, np.arange(4 * k, 4 * k + 4)[rank::world], "cpu")
    train_step(ddp, dp, opt, True, x, y)
torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out)
dist.destroy_process_group()
