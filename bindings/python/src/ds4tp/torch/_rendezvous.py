"""Bring-up of one ds4tp group from torch's store: the group's rank 0
creates its ds4tp group on a free port and publishes host:port in the
store; the others read it and dial. So the user sets nothing but the
backend name.

Store keys: torch hands each group a store prefixed by the group's name
(``PrefixStore(group_name, store)``); the keys here add ``ds4tp/`` and a
generation, counted per bring-up, so a store reused for a group of the
same name never serves an older port."""

import ipaddress
import os
import socket
import time
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
        try:
            host = rank0_host(opts, store)
            pg = _c10d.ProcessGroupDs4tp(0, size, opts.config(host, 0, timeout))
        except Exception as e:
            # The others fail at once, naming it. The store may live in this
            # process (env:// puts it on rank 0), so wait, a few seconds at
            # most, until they have read it.
            store.set(key, f"error {e}")
            deadline = time.monotonic() + 10
            while store.add(key + "/read", 0) < size - 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            raise
        store.set(key, f"ok {host} {pg.rendezvous_port}")
    else:
        word, rest = store.get(key).decode().split(" ", 1)  # waits for rank 0
        if word == "error":
            store.add(key + "/read", 1)
            raise RuntimeError(f"ds4tp backend: rank {rank} of {size}: the group's rank 0 could "
                               f"not start it: {rest}")
        host, port = rest.split(" ")
        pg = _c10d.ProcessGroupDs4tp(rank, size, opts.config(host, int(port), timeout))
    pg._connect()
    return pg
