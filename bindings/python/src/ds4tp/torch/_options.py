"""Options of the ds4tp backend, passed as ``pg_options`` to
``init_process_group`` or ``new_group``; every field left None takes the
environment's value, else the library's default."""

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional, Union

from .._constants import Transport

_TRANSPORTS = {"auto": Transport.AUTO, "tcp": Transport.TCP, "shm": Transport.SHM,
               "rdma": Transport.RDMA}


@dataclass
class Options:
    """ds4tp_group_options for a torch.distributed group.

    * ``transport``: "auto" (default: shm when every rank is on this host,
      tiered or a tcp/rdma mesh across hosts), "tcp", "shm" or "rdma"; or
      the environment's ``DS4TP_TORCH_TRANSPORT``.
    * ``host``: the address the group's rank 0 binds its rendezvous
      listener to and publishes in the store for the others to dial; or
      ``DS4TP_TORCH_HOST``; default: 127.0.0.1 when the store's host is a
      loopback address (or the store has no host), else rank 0's own
      address on the route to the store's host.
    * ``connect_timeout_ms``: bring-up deadline; default: the group's
      torch timeout (``timeout=`` of init_process_group / new_group).
    * ``op_timeout_ms``, ``peer_silence_ms``, ``chunk_bytes``, ``spin_us``,
      ``yield_us``: as in ``ds4tp.GroupOptions`` (docs/GROUPS.md).
    """
    transport: Optional[Union[str, int]] = None
    host: Optional[str] = None
    connect_timeout_ms: Optional[int] = None
    op_timeout_ms: Optional[int] = None
    peer_silence_ms: Optional[int] = None
    chunk_bytes: Optional[int] = None
    spin_us: Optional[int] = None
    yield_us: Optional[int] = None

    def transport_value(self) -> Transport:
        """The chosen ds4tp.Transport; ValueError naming a bad name."""
        t = self.transport if self.transport is not None else \
            os.environ.get("DS4TP_TORCH_TRANSPORT", "auto")
        if isinstance(t, str):
            try:
                return _TRANSPORTS[t.strip().lower()]
            except KeyError:
                raise ValueError(f"ds4tp backend: transport {t!r} is not one of "
                                 f"{', '.join(_TRANSPORTS)}") from None
        return Transport(t)

    def config(self, host: str, port: int, timeout: timedelta):
        """The extension's Config for rank 0 (binding host:port) or a rank
        dialling host:port."""
        from . import _c10d
        c = _c10d.Config()
        c.host, c.port = host, port
        c.transport = int(self.transport_value())
        ms = int(timeout.total_seconds() * 1000) if timeout else -1
        c.connect_timeout_ms = self.connect_timeout_ms if self.connect_timeout_ms is not None \
            else min(max(ms, 1000), 2**31 - 1) if ms > 0 else -1
        for name in ("op_timeout_ms", "peer_silence_ms", "chunk_bytes", "yield_us"):
            v = getattr(self, name)
            if v is not None:
                if v < 0 or v > 2**31 - 1 or (name == "chunk_bytes" and v > 2**32 - 1):
                    raise ValueError(f"ds4tp backend: {name}={v} is outside 0..{2**31 - 1}")
                setattr(c, name, int(v))
        if self.spin_us is not None:
            c.spin_us = int(self.spin_us)
        return c
