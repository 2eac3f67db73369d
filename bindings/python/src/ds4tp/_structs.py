"""The C structs field for field, the callback types, and the Python
views of commands and replies."""

import array
import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32, c_uint32,
                    c_uint64, c_void_p)

from ._buffers import _memory_view
from ._constants import (CommandKind, GATE_MASK_WORDS, IMAGE_FINGERPRINT_BYTES, REPLY_MESSAGE_MAX,
                         Role, Transport)
from ._loader import _check, _lib, _text, command_name

# ---------------------------------------------------------------------------
# Callback types (the header's function pointer typedefs).

LOG_FN = CFUNCTYPE(None, c_void_p, c_int, c_char_p)
GATE_FN = CFUNCTYPE(c_int, c_void_p, c_uint32, c_uint32, c_uint64)
BATCH_GATE_FN = CFUNCTYPE(c_int, c_void_p, c_uint32, c_uint32, c_uint64)
BIG_GATE_FN = CFUNCTYPE(c_int, c_void_p, c_uint32, c_uint64, c_void_p, c_void_p, c_uint64)
STAGE_BEFORE_FN = CFUNCTYPE(c_int, c_void_p, c_int, c_uint32, c_uint32, c_uint64, c_void_p,
                            c_uint64)
STAGE_AFTER_FN = CFUNCTYPE(c_int, c_void_p, c_int, c_uint32, c_uint32, c_uint64, c_void_p,
                           c_uint64)


# ---------------------------------------------------------------------------
# Structs. Field for field the C structs; ``size`` is set by the C
# initializers. Text fields accept str (encoded as UTF-8) and pointer+length
# pairs are set from one bytes-like value (kept alive by the struct).

class _Struct(Structure):
    _init_fn = None  # name of the C initializer, if any

    def __init__(self, **fields):
        super().__init__()
        if self._init_fn:
            getattr(_lib(), self._init_fn)(ctypes.byref(self))
        else:
            self.size = ctypes.sizeof(self)
        for name, value in fields.items():
            if not hasattr(self, name):
                raise AttributeError(f"{type(self).__name__} has no field {name!r}")
            setattr(self, name, value)

    def __setattr__(self, name, value):
        if isinstance(value, str) and name in self._text_fields():
            value = value.encode()
        super().__setattr__(name, value)

    @classmethod
    def _text_fields(cls):
        return {n for n, t in cls._fields_ if t is c_char_p}

    def _set_bytes(self, ptr_field, len_field, data):
        """Points ptr_field at a private copy of ``data`` (None clears)."""
        if data is None:
            super().__setattr__(ptr_field, None)
            super().__setattr__(len_field, 0)
            self.__dict__.pop("_keep_" + ptr_field, None)
            return
        buf = ctypes.create_string_buffer(bytes(data), len(data) or 1)
        self.__dict__["_keep_" + ptr_field] = buf
        super().__setattr__(ptr_field, ctypes.cast(buf, c_void_p))
        super().__setattr__(len_field, len(data))

    def as_dict(self):
        """The fields as a dict (for printing and comparison)."""
        return {n: getattr(self, n) for n, _ in self._fields_}

    def __repr__(self):
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n, _ in self._fields_)
        return f"{type(self).__name__}({inner})"


class Options(_Struct):
    """ds4tp_options: ``Options(role=Role.LEADER, listen_port=0, ...)``.

    Defaults come from ds4tp_options_init. Extras over the C fields:
    ``log`` takes a Python callable ``log(level, message)`` (replacing
    log_fn/log_user_data) and ``psk`` takes the key as bytes (setting
    psk/psk_bytes).
    """
    _init_fn = "ds4tp_options_init"
    _fields_ = [
        ("size", c_uint32),
        ("role", c_int32),
        ("transport", c_int32),
        ("listen_host", c_char_p),
        ("listen_port", c_int32),
        ("leader_host", c_char_p),
        ("leader_port", c_int32),
        ("connect_timeout_ms", c_int32),
        ("hello_timeout_ms", c_int32),
        ("gate_timeout_ms", c_int32),
        ("big_gate_timeout_ms", c_int32),
        ("frame_timeout_ms", c_int32),
        ("spin_us", c_int32),
        ("log_fn", LOG_FN),
        ("log_user_data", c_void_p),
        ("log_level", c_int32),
        ("max_frame_bytes", c_uint32),
        ("rdma_device", c_char_p),
        ("rdma_port", c_int32),
        ("rdma_gid_index", c_int32),
        ("psk", c_void_p),
        ("psk_bytes", c_uint32),
        ("psk_file", c_char_p),
        ("peer_silence_ms", c_int32),
        ("peer_arrival_timeout_ms", c_int32),
        ("failover", c_int32),
        ("rails", c_char_p),
        ("rdma_rails", c_char_p),
    ]

    @classmethod
    def leader(cls, port=0, host="127.0.0.1", **fields):
        """A leader listening on host:port (0 picks a free port)."""
        return cls(role=Role.LEADER, listen_host=host, listen_port=port, **fields)

    @classmethod
    def worker(cls, host, port, **fields):
        """A worker dialing the leader at host:port."""
        return cls(role=Role.WORKER, leader_host=host, leader_port=port, **fields)

    def __setattr__(self, name, value):
        if name == "log":
            self._set_log(value)
        elif name == "psk" and not (value is None or isinstance(value, int)):
            self._set_bytes("psk", "psk_bytes", value)
        else:
            super().__setattr__(name, value)

    def __getattr__(self, name):
        if name == "log":
            return self.__dict__.get("_log_callable")
        raise AttributeError(name)

    def _set_log(self, fn):
        if fn is None:
            super().__setattr__("log_fn", LOG_FN())
            self.__dict__.pop("_log_callable", None)
            return

        def trampoline(_user_data, level, msg):
            try:
                fn(level, msg.decode(errors="replace") if msg else "")
            except Exception:  # a logger must never break the C caller
                pass

        self.__dict__["_log_callable"] = fn
        super().__setattr__("log_fn", LOG_FN(trampoline))



class GroupOptions(_Struct):
    """ds4tp_group_options. ``psk`` is set from bytes (kept alive here);
    ``rendezvous_host`` and ``job_id`` from str."""
    _init_fn = "ds4tp_group_options_init"
    _fields_ = [
        ("size", c_uint32),
        ("rank", c_int32),
        ("group_size", c_int32),
        ("rendezvous_host", c_char_p),
        ("rendezvous_port", c_int32),
        ("transport", c_int32),
        ("connect_timeout_ms", c_int32),
        ("op_timeout_ms", c_int32),
        ("chunk_bytes", c_uint32),
        ("psk", c_void_p),
        ("psk_bytes", c_uint32),
        ("spin_us", c_int32),
        ("peer_silence_ms", c_int32),
        ("yield_us", c_int32),
        ("peer_arrival_timeout_ms", c_int32),
        ("job_id", c_char_p),
    ]

    def __setattr__(self, name, value):
        if name == "psk" and not (value is None or isinstance(value, int)):
            self._set_bytes("psk", "psk_bytes", value)
            return
        super().__setattr__(name, value)


class Identity(_Struct):
    """ds4tp_identity. ``engine_blob`` takes bytes (sets engine_blob_bytes);
    ``gate_slot_mask`` takes a sequence of GATE_MASK_WORDS ints."""
    _init_fn = "ds4tp_identity_init"
    _fields_ = [
        ("size", c_uint32),
        ("model_bytes", c_uint64),
        ("model_id", c_uint32),
        ("n_layer", c_uint32),
        ("n_embd", c_uint32),
        ("n_vocab", c_uint32),
        ("quant_bits", c_uint32),
        ("ctx_size", c_uint32),
        ("gate_slot_start", c_uint32),
        ("gate_slot_step", c_uint32),
        ("gates_per_token", c_uint32),
        ("gate_slot_mask", c_uint64 * GATE_MASK_WORDS),
        ("features", c_uint64),
        ("engine_blob", c_void_p),
        ("engine_blob_bytes", c_uint32),
    ]

    def __setattr__(self, name, value):
        if name == "engine_blob" and not (value is None or isinstance(value, int)):
            self._set_bytes("engine_blob", "engine_blob_bytes", value)
        elif name == "gate_slot_mask" and not isinstance(value, ctypes.Array):
            words = list(value)
            if len(words) > GATE_MASK_WORDS:
                raise ValueError(f"gate_slot_mask has {GATE_MASK_WORDS} words, got {len(words)}")
            super().__setattr__(name, (c_uint64 * GATE_MASK_WORDS)(*words))
        else:
            super().__setattr__(name, value)


class SlabLayout(_Struct):
    """ds4tp_slab_layout: offsets from the slab base (see the header)."""
    _fields_ = [
        ("size", c_uint32),
        ("slots", c_uint32),
        ("batch_gates", c_uint32),
        ("batch_rows", c_uint32),
        ("total_bytes", c_uint64),
        ("vec_bytes", c_uint64),
        ("vec_stride", c_uint64),
        ("flag_stride", c_uint64),
        ("out_offset", c_uint64),
        ("in_offset", c_uint64),
        ("in_seq_offset", c_uint64),
        ("token_offset", c_uint64),
        ("gpu_flags_offset", c_uint64),
        ("batch_out_offset", c_uint64),
        ("batch_in_offset", c_uint64),
        ("batch_gate_stride", c_uint64),
        ("big_out_offset", c_uint64),
        ("big_in_offset", c_uint64),
        ("big_staging_bytes", c_uint64),
        ("gpu_release_offset", c_uint64),
        ("slot_stride", c_uint64),
    ]


class StagingHooks(_Struct):
    """ds4tp_staging_hooks (raw). Pair.set_staging_hooks builds one from
    Python callables; use this only to pass C function pointers."""
    _fields_ = [
        ("size", c_uint32),
        ("user_data", c_void_p),
        ("before_exchange", STAGE_BEFORE_FN),
        ("after_exchange", STAGE_AFTER_FN),
    ]


class GateServiceOptions(_Struct):
    """ds4tp_gate_service_options (defaults from the C initializer)."""
    _init_fn = "ds4tp_gate_service_options_init"
    _fields_ = [
        ("size", c_uint32),
        ("spin_us", c_int32),
        ("yield_us", c_int32),
        ("sleep_us", c_int32),
        ("stop_timeout_ms", c_int32),
        ("cpu", c_int32),
    ]


class BatchItem(Structure):
    """ds4tp_batch_item: one decode step of a batch."""
    _fields_ = [("session_id", c_uint64), ("token", c_int32), ("flags", c_uint32)]

    def __repr__(self):
        return f"BatchItem(session_id={self.session_id}, token={self.token}, flags={self.flags})"


class ImageSpan(Structure):
    """ds4tp_image_span (raw). Use :class:`Image` with send_sync_images."""
    _fields_ = [
        ("token_start", c_uint32),
        ("token_count", c_uint32),
        ("data_width", c_uint32),
        ("width", c_uint32),
        ("height", c_uint32),
        ("content_width", c_uint32),
        ("content_height", c_uint32),
        ("fingerprint", ctypes.c_uint8 * IMAGE_FINGERPRINT_BYTES),
        ("embd", POINTER(ctypes.c_float)),
    ]


class _CommandStruct(Structure):
    """ds4tp_command (raw); :class:`Command` is the Python copy."""
    _fields_ = [
        ("size", c_uint32),
        ("kind", c_int32),
        ("session_id", c_uint64),
        ("seq", c_uint64),
        ("hash", c_uint64),
        ("token", c_int32),
        ("pos", c_int32),
        ("limit", c_int32),
        ("count", c_int32),
        ("mode", c_uint32),
        ("flags", c_uint32),
        ("ctx_size", c_uint32),
        ("logits_floats", c_uint32),
        ("tokens", POINTER(c_int32)),
        ("n_tokens", c_uint32),
        ("items", POINTER(BatchItem)),
        ("n_items", c_uint32),
        ("images", POINTER(ImageSpan)),
        ("n_images", c_uint32),
    ]


class _ReplyStruct(Structure):
    """ds4tp_reply (raw); callbacks get a :class:`Reply`."""
    _fields_ = [
        ("logits", POINTER(ctypes.c_float)),
        ("logits_rows", c_uint32),
        ("logits_floats", c_uint32),
        ("position", c_uint32),
        ("hash", c_uint64),
        ("message", ctypes.c_char * REPLY_MESSAGE_MAX),
    ]


COMMAND_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, POINTER(_CommandStruct), POINTER(_ReplyStruct))

# The callback slots of ds4tp_worker_ops, in order.
WORKER_OPS = ("session_create", "session_destroy", "sync", "sync_images", "eval", "mtp",
              "rewind", "invalidate", "spec_restore", "eval_batch", "mixed_batch", "verify",
              "verify_commit", "draft", "hash")


class WorkerOps(_Struct):
    """ds4tp_worker_ops (raw); Pair.worker_run builds one from a handler."""
    _init_fn = "ds4tp_worker_ops_init"
    _fields_ = [("size", c_uint32)] + [(name, COMMAND_FN) for name in WORKER_OPS]


class Image:
    """An image inside a prompt for send_sync_images: token_count rows of
    data_width float32 (``embd``, any float buffer or sequence)."""

    def __init__(self, token_start, token_count, data_width, width, height, content_width,
                 content_height, fingerprint=b"", embd=()):
        self.token_start, self.token_count, self.data_width = token_start, token_count, data_width
        self.width, self.height = width, height
        self.content_width, self.content_height = content_width, content_height
        self.fingerprint = bytes(fingerprint)
        self.embd = embd

    def __repr__(self):
        return (f"Image(tokens {self.token_start}+{self.token_count}, width {self.data_width}, "
                f"{self.width}x{self.height})")


class Command:
    """A received command, copied out of the C struct (see ds4tp_command:
    which fields a kind uses). ``tokens`` is a list of ints, ``items`` a list
    of BatchItem, ``images`` a list of :class:`Image` (embd as array('f'))."""

    _scalars = ("session_id", "seq", "hash", "token", "pos", "limit", "count", "mode", "flags",
                "ctx_size", "logits_floats")

    def __init__(self, raw):
        try:
            self.kind = CommandKind(raw.kind)
        except ValueError:
            self.kind = raw.kind
        for name in self._scalars:
            setattr(self, name, getattr(raw, name))
        self.tokens = raw.tokens[:raw.n_tokens] if raw.n_tokens else []
        self.items = [BatchItem(it.session_id, it.token, it.flags)
                      for it in (raw.items[:raw.n_items] if raw.n_items else [])]
        self.images = []
        for i in range(raw.n_images):
            im = raw.images[i]
            n = im.token_count * im.data_width
            embd = array.array("f", bytes(n * 4))
            if n:
                ctypes.memmove(embd.buffer_info()[0], im.embd, n * 4)
            self.images.append(Image(im.token_start, im.token_count, im.data_width, im.width,
                                     im.height, im.content_width, im.content_height,
                                     bytes(im.fingerprint), embd))

    @property
    def name(self):
        """Upper-case name of the kind ("EVAL")."""
        return command_name(self.kind)

    def __repr__(self):
        return f"<ds4tp.Command {self.name} session {self.session_id}>"


class Reply:
    """What a worker_run callback hands back (valid during the callback).

    ``logits`` is a writable float32 memoryview of logits_rows *
    logits_floats values to fill row after row (None when none are due);
    set ``position`` (SYNC*), ``hash`` (HASH) and ``message`` (when
    failing) as needed."""

    def __init__(self, raw):
        self._raw = raw
        n = raw.logits_rows * raw.logits_floats
        self.logits = (_memory_view(ctypes.addressof(raw.logits.contents), n * 4).cast("f")
                       if raw.logits and n else None)

    logits_rows = property(lambda self: self._raw.logits_rows)
    logits_floats = property(lambda self: self._raw.logits_floats)

    @property
    def position(self):
        return self._raw.position

    @position.setter
    def position(self, value):
        self._raw.position = value

    @property
    def hash(self):
        return self._raw.hash

    @hash.setter
    def hash(self, value):
        self._raw.hash = value

    @property
    def message(self):
        return _text(self._raw.message)

    @message.setter
    def message(self, text):
        self._raw.message = text.encode()[:REPLY_MESSAGE_MAX - 1]

    def _release(self):
        if self.logits is not None:
            self.logits.release()


def schedule_slot(identity, seq):
    """Slot row gate ``seq`` must hit under ``identity``'s schedule; -1 when
    seq is 0 or the identity is invalid."""
    return _lib().ds4tp_schedule_slot(ctypes.byref(identity), seq)


def slab_layout(identity):
    """The :class:`SlabLayout` for ``identity`` (pure). Raises Error(EINVAL)."""
    layout = SlabLayout()
    _check(_lib().ds4tp_slab_layout_compute(ctypes.byref(identity), ctypes.byref(layout)))
    return layout


STATS_BUCKETS = 26  # DS4TP_STATS_BUCKETS


class LinkInfo(Structure):
    """ds4tp_link_info (ds4tp_links); Pair.links() hands them out as dicts."""
    _fields_ = [("transport", c_int32), ("role", c_int32), ("state", c_int32), ("row", c_int32),
                ("share", c_uint32), ("rate_mbit", c_uint32), ("rtt_us", c_uint32),
                ("reserved", c_uint32)]

    def as_dict(self):
        return {"transport": self.transport, "role": self.role, "state": self.state,
                "row": bool(self.row), "share": self.share, "rate_mbit": self.rate_mbit,
                "rtt_us": self.rtt_us}


class StatsHist(Structure):
    """ds4tp_stats_hist: bucket i counts values <= 256 ns << i; the last, the rest."""
    _fields_ = [("count", c_uint64), ("sum_ns", c_uint64), ("buckets", c_uint64 * STATS_BUCKETS)]

    def as_dict(self):
        return {"count": self.count, "sum_ns": self.sum_ns, "buckets": list(self.buckets)}


_STATS_COUNTERS = [
    "row_gates", "batch_gates", "big_gates", "bytes_sent", "bytes_received", "errors",
    "timeouts", "desyncs", "rdma_retries", "rdma_qp_recreated", "heartbeats_received",
    "heartbeats_missed", "split_gates", "peer_wait_ns", "transfer_ns", "all_reduces",
    "all_gathers", "broadcasts", "barriers",
]
_STATS_HISTS = ["row_gate", "batch_gate", "big_gate", "control_round_trip", "all_reduce",
                "row_peer_wait", "group_host_step", "group_across_step"]
# Where the waits' time went (fields after failovers).
_STATS_WAITS = ["waits", "wait_spin_ns", "wait_yield_ns", "wait_sleep_ns"]
# The group collective kinds, in the order of DS4TP_COLL_* (the last fields:
# each kind's count and latency).
COLL_NAMES = ["all_reduce", "all_gather", "broadcast", "barrier", "reduce_scatter", "reduce",
              "gather", "scatter", "all_gather_v", "all_gather_rows", "all_to_all_v"]
# DS4TP_STATS_RANKS: the per-rank arrival fields' length.
STATS_RANKS = 16


class Stats(Structure):
    """ds4tp_stats (ds4tp_stats_read); Pair.stats() hands it out as a dict."""
    _fields_ = ([("size", c_uint32), ("rank", c_int32), ("transport", c_int32),
                 ("reserved0", c_uint32)] + [(n, c_uint64) for n in _STATS_COUNTERS] +
                [(n, StatsHist) for n in _STATS_HISTS] + [("failovers", c_uint64)] +
                [(n, c_uint64) for n in _STATS_WAITS] +
                [("collectives", c_uint64 * len(COLL_NAMES)),
                 ("collective", StatsHist * len(COLL_NAMES)),
                 ("arrived_last", c_uint64 * STATS_RANKS),
                 ("lateness", StatsHist * STATS_RANKS)])

    def as_dict(self):
        try:
            transport = Transport(self.transport)
        except ValueError:  # a newer library's transport
            transport = self.transport
        d = {"rank": self.rank, "transport": transport}
        d.update({n: getattr(self, n) for n in _STATS_COUNTERS})
        d.update({n: getattr(self, n).as_dict() for n in _STATS_HISTS})
        d["failovers"] = self.failovers
        d.update({n: getattr(self, n) for n in _STATS_WAITS})
        # Per collective kind: {"reduce_scatter": count, ...} and histograms.
        d["collectives"] = {n: self.collectives[i] for i, n in enumerate(COLL_NAMES)}
        d["collective"] = {n: self.collective[i].as_dict() for i, n in enumerate(COLL_NAMES)}
        # Groups, per rank (list index = rank): calls it entered last, and
        # its lateness histogram.
        d["arrived_last"] = list(self.arrived_last)
        d["lateness"] = [h.as_dict() for h in self.lateness]
        return d
