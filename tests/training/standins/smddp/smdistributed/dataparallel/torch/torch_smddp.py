"""Stand-in for SMDDP's torch module (not on PyPI). Like the real one, importing it registers the
"smddp" process-group backend; here that backend is gloo, so a CPU job really trains. It records
the import and every init_process_group call so a test can assert their order and the backend."""

import torch.distributed as dist
from record import record

record("import torch_smddp", process_group_initialized=dist.is_initialized())


def _create_backend(store, rank, world_size, timeout):
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


dist.Backend.register_backend("smddp", _create_backend, devices=["cpu"])
_init_process_group = dist.init_process_group


def _recording_init_process_group(*args, **kwargs):
    record("init_process_group", backend=kwargs.get("backend", args[0] if args else None))
    return _init_process_group(*args, **kwargs)


dist.init_process_group = _recording_init_process_group
