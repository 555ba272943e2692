"""PyTorch's torchrun (torch.distributed.run) with Debian 12's torch 1.13 bug worked around: under
Python 3.11 its Std.from_str returns None, so torchrun fails before starting any worker; the
launcher tests run the real torchrun through this. Usage: python3 torchrun.py [torchrun args]
"""
import sys

import torch.distributed.elastic.multiprocessing.api as api

api.Std.from_str = staticmethod(lambda s: api.Std.NONE)

import torch.distributed.run as run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run.main())
