"""Bring-up of one ds4tp group from torch's store: the group's rank 0
creates its ds4tp group on a free port and publishes host:port in the
store; the others read it and dial. So the user sets nothing but the
backend name.

Store keys: torch hands each group a store prefixed by the group's name
(``PrefixStore(group_name, store)``); the keys here add ``ds4tp/`` and a
generation, counted per bring-up, so a store reused for a group of the
same name never serves an older port."""

import ipaddress
import socket
from datetime import timedelta
from typing import Any, Optional

import torch.distributed as dist

from ._options import Options


def _store_host(store: Any) -> Optional[str]:
    """The host of the TCPStore under ``store``'s prefixes, else None."""
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store.host if isinstance(store, dist.TCPStore) else None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def _address_towards(host: str) -> str:
    """This host's IPv4 address on the route to ``host`` (a UDP connect
    sends nothing; it only picks the route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), 9))
        return s.getsockname()[0]


def rank0_host(opts: Options, store: Any) -> str:
    """The address rank 0 binds and publishes (see Options.host)."""
    import os
    if opts.host:
        return opts.host
    if os.environ.get("DS4TP_TORCH_HOST"):
        return os.environ["DS4TP_TORCH_HOST"]
    host = _store_host(store)
    if host is None or _is_loopback(host):
        return "127.0.0.1"
    try:
        return _address_towards(host)
    except OSError as e:
        raise RuntimeError(f"ds4tp backend: no route from this host to the store's host {host!r} "
                           f"({e}); set DS4TP_TORCH_HOST (or Options(host=...)) to the address "
                           f"the other ranks reach this one at") from None


def create(store: Any, rank: int, size: int, opts: Options, timeout: timedelta):
    """This rank's connected ProcessGroupDs4tp (blocking until every rank
    of the group has joined, up to the connect deadline)."""
    from . import _c10d
    if size == 1:  # no peers: collectives are local
        return _c10d.ProcessGroupDs4tp(0, 1, opts.config("", 0, timeout))
    # Every rank adds 1 before its bring-up; all of one bring-up's adds
    # come before any of the next one's (that needs every rank joined).
    generation = (store.add("ds4tp/joined", 1) - 1) // size
    key = f"ds4tp/rendezvous/{generation}"
    if rank == 0:
        host = rank0_host(opts, store)
        pg = _c10d.ProcessGroupDs4tp(0, size, opts.config(host, 0, timeout))
        store.set(key, f"{host} {pg.rendezvous_port}")
    else:
        host, port = store.get(key).decode().split(" ")  # waits for rank 0
        pg = _c10d.ProcessGroupDs4tp(rank, size, opts.config(host, int(port), timeout))
    pg._connect()
    return pg
