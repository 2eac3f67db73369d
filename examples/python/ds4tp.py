"""libds4tp for Python: a ctypes binding over the C ABI (include/ds4tp/ds4tp.h).

Standard library only. The shared library is found, in this order, at
``$DS4TP_LIBRARY`` (a path to libds4tp.so), in a build tree of the
repository this file lives in (``build*/lib/libds4tp.so``), then by the
system loader (``libds4tp.so.0``).

A leader::

    import ds4tp
    ident = ds4tp.Identity(n_layer=2, n_embd=64, n_vocab=1000, model_bytes=1)
    with ds4tp.Pair(ds4tp.Options.leader(port=7070), ident) as tp:
        tp.connect()
        tp.attach_slab()
        out = tp.out_vector(0, ds4tp.GATE_ATTN)   # memoryview of float32
        out[0] = 1.0
        tp.gate_exchange(0, ds4tp.GATE_ATTN, 1)
        print(tp.in_vector(0, ds4tp.GATE_ATTN)[0])

The worker is the same with ``ds4tp.Options.worker("HOST", 7070)``.

Every failing call raises :class:`Error` with the C status code and the
library's message. ctypes releases the GIL during every C call, so one
Python thread may sit in a gate while others run. The layout of this
module follows the header: one block per header section, so a new C
function is one line in ``_DECLARATIONS`` plus a method.
"""

import array
import ctypes
import ctypes.util
import enum
import os
import weakref
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32,
                    c_int64, c_size_t, c_uint, c_uint32, c_uint64, c_void_p)
from pathlib import Path

__all__ = [
    "Error", "Status", "Role", "Transport", "LogLevel", "ServiceState",
    "Options", "Identity", "SlabLayout", "StagingHooks", "GateServiceOptions",
    "Pair", "version", "version_string", "protocol_version", "strerror",
    "err_name", "last_error", "transport_name", "transport_available",
    "schedule_slot", "slab_layout", "library_path",
    "GATE_ATTN", "GATE_FFN", "GATES_PER_LAYER", "BATCH_MAX_ROWS",
    "BATCH_GATES_PER_LAYER", "GATE_MASK_WORDS", "ENGINE_BLOB_MAX",
    "STAGE_ROW", "STAGE_BATCH", "GATE_POISON",
    "CommandKind", "CommitMode", "DraftMode", "Command", "Image", "BatchItem", "ImageSpan",
    "Reply", "WorkerOps", "command_name", "WAIT_FOREVER", "ACK_DONE", "ACK_UNAVAILABLE",
    "ACK_CANCELLED", "VERIFY_HEAD_SPLIT", "VERIFY_DRAFT_SHARED", "VERIFY_DRAFT_SEED",
    "SMALL_EXCHANGE_MAX", "HEAD_ROW_MAX", "DRAFTER_META_BYTES", "IMAGE_FINGERPRINT_BYTES",
    "MTP_LIMIT_MAX", "REPLY_MESSAGE_MAX",
]

# ---------------------------------------------------------------------------
# Versions and status codes (mirrors of the header's macros; the tests check
# them against the linked library).

VERSION_MAJOR, VERSION_MINOR, VERSION_PATCH = 0, 1, 0
PROTOCOL_VERSION = 2


class Status(enum.IntEnum):
    """DS4TP_* status codes; numbers are pinned by the C header."""
    OK = 0
    EINVAL = -1
    ETIMEDOUT = -2
    EPEERCLOSED = -3
    EIDENTITY = -4
    EDESYNC = -5
    EPROTO = -6
    EAUTH = -7
    EIO = -8
    EUNSUPPORTED = -9
    ECANCELLED = -10
    EFAILED = -11
    EVERSION = -12
    ESTATE = -13
    ENOMEM = -14
    EDIVERGED = -15
    EREMOTE = -16


# Constants (enum in the header).
GATE_ATTN = 0
GATE_FFN = 1
GATES_PER_LAYER = 2
BATCH_MAX_ROWS = 8
BATCH_GATES_PER_LAYER = 2
GATE_MASK_WORDS = 4
ENGINE_BLOB_MAX = 4096
STAGE_ROW = 1
STAGE_BATCH = 2
GATE_POISON = (1 << 64) - 1


class Role(enum.IntEnum):
    """ds4tp_role."""
    NONE = 0
    LEADER = 1
    WORKER = 2


class Transport(enum.IntEnum):
    """ds4tp_transport."""
    AUTO = 0
    TCP = 1
    SHM = 2
    RDMA = 3


class LogLevel(enum.IntEnum):
    """ds4tp_log_level."""
    ERROR = 0
    WARN = 1
    INFO = 2
    DEBUG = 3


class ServiceState(enum.IntEnum):
    """ds4tp_service_state of the gate service."""
    STOPPED = 0
    RUNNING = 1
    FAILED = 2


# Control plane constants.
WAIT_FOREVER = -1
SMALL_EXCHANGE_MAX = 192
HEAD_ROW_MAX = 131072
DRAFTER_META_BYTES = 64
IMAGE_FINGERPRINT_BYTES = 32
MTP_LIMIT_MAX = 7
REPLY_MESSAGE_MAX = 256
ACK_DONE = 0
ACK_UNAVAILABLE = 1
ACK_CANCELLED = 2
VERIFY_HEAD_SPLIT = 1
VERIFY_DRAFT_SHARED = 2
VERIFY_DRAFT_SEED = 4


class CommandKind(enum.IntEnum):
    """ds4tp_command_kind: the commands a leader sends (frame types)."""
    SYNC = 1
    EVAL = 2
    REWIND = 3
    INVALIDATE = 4
    STOP = 5
    HASH = 6
    VERIFY = 11
    VERIFY_COMMIT = 12
    SESSION_CREATE = 13
    SESSION_DESTROY = 14
    EVAL_BATCH = 15
    MIXED_BATCH = 16
    SYNC_IMAGES = 18
    MTP = 21
    DRAFT = 23
    SPEC_RESTORE = 24


class CommitMode(enum.IntEnum):
    """ds4tp_commit_mode for send_verify_commit."""
    ROLLBACK = 0
    FULL = 1
    PREFIX = 2


class DraftMode(enum.IntEnum):
    """ds4tp_draft_mode for send_draft."""
    MAINTAIN = 1
    PROPOSE = 2


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


# ---------------------------------------------------------------------------
# The C functions, one block per header section: (name, restype, argtypes).

_P = c_void_p  # ds4tp_pair * (opaque)

_DECLARATIONS = {
    "versions": [
        ("ds4tp_version", c_uint, []),
        ("ds4tp_version_string", c_char_p, []),
        ("ds4tp_protocol_version", c_uint, []),
    ],
    "status codes": [
        ("ds4tp_strerror", c_char_p, [c_int]),
        ("ds4tp_err_name", c_char_p, [c_int]),
        ("ds4tp_last_error", c_char_p, []),
    ],
    "constants": [
        ("ds4tp_transport_name", c_char_p, [c_int]),
        ("ds4tp_transport_available", c_int, [c_int, c_char_p, c_size_t]),
    ],
    "options": [
        ("ds4tp_options_init", None, [POINTER(Options)]),
    ],
    "identity": [
        ("ds4tp_identity_init", None, [POINTER(Identity)]),
        ("ds4tp_schedule_slot", c_int64, [POINTER(Identity), c_uint64]),
    ],
    "slab layout": [
        ("ds4tp_slab_layout_compute", c_int, [POINTER(Identity), POINTER(SlabLayout)]),
    ],
    "pair handle": [
        ("ds4tp_new", c_int, [POINTER(c_void_p), POINTER(Options), POINTER(Identity)]),
        ("ds4tp_connect", c_int, [_P]),
        ("ds4tp_free", None, [_P]),
        ("ds4tp_listen_port", c_int, [_P]),
        ("ds4tp_rank", c_int, [_P]),
        ("ds4tp_transport_active", c_int, [_P]),
        ("ds4tp_peer_ctx_size", c_uint32, [_P]),
        ("ds4tp_failed", c_int, [_P]),
        ("ds4tp_mark_failed", None, [_P, c_char_p]),
        ("ds4tp_errmsg", c_char_p, [_P]),
    ],
    "slab": [
        ("ds4tp_slab_layout_get", c_int, [_P, POINTER(SlabLayout)]),
        ("ds4tp_slab_bytes", c_uint64, [_P]),
        ("ds4tp_slab_out_offset", c_uint64, [_P, c_uint32, c_uint32]),
        ("ds4tp_slab_in_offset", c_uint64, [_P, c_uint32, c_uint32]),
        ("ds4tp_slab_batch_out_offset", c_uint64, [_P, c_uint32]),
        ("ds4tp_slab_batch_in_offset", c_uint64, [_P, c_uint32]),
        ("ds4tp_slab_gpu_flags_offset", c_uint64, [_P]),
        ("ds4tp_attach_slab", c_int, [_P, c_void_p, c_uint64]),
        ("ds4tp_slab_base", c_void_p, [_P]),
        ("ds4tp_detach_slab", None, [_P]),
    ],
    "data plane": [
        ("ds4tp_gate_exchange", c_int, [_P, c_uint32, c_uint32, c_uint64]),
        ("ds4tp_batch_gate_exchange", c_int, [_P, c_uint32, c_uint32, c_uint64]),
        ("ds4tp_big_gate_exchange", c_int, [_P, c_uint32, c_uint64, c_void_p, c_void_p, c_uint64]),
    ],
    "engine integration": [
        ("ds4tp_gate_callback", c_int, [c_void_p, c_uint32, c_uint32, c_uint64]),
        ("ds4tp_batch_gate_callback", c_int, [c_void_p, c_uint32, c_uint32, c_uint64]),
        ("ds4tp_big_gate_callback", c_int,
         [c_void_p, c_uint32, c_uint64, c_void_p, c_void_p, c_uint64]),
        ("ds4tp_set_staging_hooks", c_int, [_P, POINTER(StagingHooks)]),
        ("ds4tp_gate_service_options_init", None, [POINTER(GateServiceOptions)]),
        ("ds4tp_gate_service_start", c_int, [_P, POINTER(GateServiceOptions)]),
        ("ds4tp_gate_service_stop", c_int, [_P]),
        ("ds4tp_gate_service_state", c_int, [_P]),
        ("ds4tp_gate_seq", c_uint64, [_P]),
    ],
    "control plane: leader commands": [
        ("ds4tp_command_name", c_char_p, [c_int]),
        ("ds4tp_send_session_create", c_int, [_P, c_uint64, c_uint32]),
        ("ds4tp_send_session_destroy", c_int, [_P, c_uint64]),
        ("ds4tp_send_sync", c_int, [_P, c_uint64, POINTER(c_int32), c_uint32, c_uint32]),
        ("ds4tp_send_sync_images", c_int,
         [_P, c_uint64, POINTER(c_int32), c_uint32, POINTER(ImageSpan), c_uint32, c_uint32]),
        ("ds4tp_send_eval", c_int, [_P, c_uint64, c_uint64, c_int32, c_uint32]),
        ("ds4tp_send_mtp", c_int, [_P, c_uint64, c_uint64, c_int32, c_uint32]),
        ("ds4tp_send_rewind", c_int, [_P, c_uint64, c_int32]),
        ("ds4tp_send_invalidate", c_int, [_P, c_uint64]),
        ("ds4tp_send_spec_restore", c_int, [_P, c_uint64, c_int32]),
        ("ds4tp_send_eval_batch", c_int, [_P, POINTER(BatchItem), c_uint32, c_uint32]),
        ("ds4tp_send_mixed_batch", c_int,
         [_P, c_uint64, POINTER(c_int32), c_uint32, POINTER(BatchItem), c_uint32, c_uint32]),
        ("ds4tp_send_verify", c_int, [_P, c_uint64, POINTER(c_int32), c_uint32, c_uint32]),
        ("ds4tp_send_verify_commit", c_int, [_P, c_int32, c_int32, c_uint32]),
        ("ds4tp_send_draft", c_int, [_P, c_uint64, c_int32, c_int32, c_uint32]),
        ("ds4tp_send_stop", c_int, [_P]),
    ],
    "control plane: leader replies": [
        ("ds4tp_wait_ack", c_int, [_P, c_uint64, POINTER(c_int32)]),
        ("ds4tp_wait_sync", c_int, [_P, c_uint64, POINTER(c_int32), POINTER(c_uint32)]),
        ("ds4tp_recv_logits", c_int, [_P, c_void_p, c_uint32]),
        ("ds4tp_remote_status", c_int32, [_P]),
    ],
    "control plane: both ranks": [
        ("ds4tp_hash_check", c_int, [_P, c_uint64, c_uint64, c_uint64]),
        ("ds4tp_sync_checkpoint", c_int, [_P, c_uint32, c_int32, c_int32, c_int, POINTER(c_int)]),
        ("ds4tp_agree_execution_mode", c_int, [_P, c_uint32, POINTER(c_uint32)]),
        ("ds4tp_agree_drafter_split", c_int, [_P, c_int, c_void_p, POINTER(c_int), POINTER(c_int)]),
        ("ds4tp_block_begin", c_int, [_P, c_uint32, c_uint32, POINTER(c_uint32)]),
        ("ds4tp_block_end", c_int, [_P]),
        ("ds4tp_small_exchange", c_int, [_P, c_void_p, c_void_p, c_uint32]),
        ("ds4tp_head_row_send", c_int, [_P, c_uint32, c_void_p, c_uint32]),
        ("ds4tp_head_row_recv", c_int, [_P, c_uint32, c_void_p, c_uint32]),
    ],
    "control plane: worker": [
        ("ds4tp_command_init", None, [POINTER(_CommandStruct)]),
        ("ds4tp_command_free", None, [POINTER(_CommandStruct)]),
        ("ds4tp_recv_command", c_int, [_P, POINTER(_CommandStruct), c_int32]),
        ("ds4tp_send_ack", c_int, [_P, c_int32]),
        ("ds4tp_send_sync_ack", c_int, [_P, c_int32, c_uint32]),
        ("ds4tp_send_logits", c_int, [_P, c_void_p, c_uint32]),
        ("ds4tp_send_error", c_int, [_P, c_int32, c_char_p]),
        ("ds4tp_worker_ops_init", None, [POINTER(WorkerOps)]),
        ("ds4tp_worker_run", c_int, [_P, POINTER(WorkerOps), c_void_p]),
    ],
}


def library_path():
    """Where the shared library is loaded from (see the module docstring)."""
    env = os.environ.get("DS4TP_LIBRARY")
    if env:
        return env
    root = Path(__file__).resolve().parent.parent.parent
    for candidate in [root / "build" / "lib" / "libds4tp.so",
                      *sorted(root.glob("build*/lib/libds4tp.so"))]:
        if candidate.exists():
            return str(candidate)
    return ctypes.util.find_library("ds4tp") or "libds4tp.so.0"


class _Missing:
    """Stands in for a function the loaded library lacks (older build)."""

    def __init__(self, name, path):
        self.name, self.path = name, path

    def __call__(self, *args):
        raise Error(Status.EUNSUPPORTED,
                    f"{self.name} is not in {self.path}: the library is older than this "
                    "binding; rebuild libds4tp or point DS4TP_LIBRARY at a newer one")


_LIB = None


def _lib():
    """Loads and declares the library once (lazily, so importing never fails)."""
    global _LIB
    if _LIB is None:
        path = library_path()
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise OSError(f"cannot load libds4tp from {path!r} ({e}); set DS4TP_LIBRARY "
                          "to the path of libds4tp.so") from e
        for block in _DECLARATIONS.values():
            for name, restype, argtypes in block:
                try:
                    fn = getattr(lib, name)
                except AttributeError:
                    setattr(lib, name, _Missing(name, path))
                    continue
                fn.restype = restype
                fn.argtypes = argtypes
        lib.path = path
        _LIB = lib
    return _LIB


def _text(raw):
    return raw.decode(errors="replace") if raw is not None else ""


# ---------------------------------------------------------------------------
# Errors and module-level calls.

class Error(Exception):
    """A failed ds4tp call.

    ``status`` is the DS4TP_E* code (a :class:`Status` when known), ``name``
    its symbolic name, ``message`` the library's explanation.
    """

    def __init__(self, status, message=""):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        self.name = err_name(status)
        self.message = message or strerror(status)
        super().__init__(f"{self.name}: {self.message}")


def _check(rc):
    if rc != Status.OK:
        raise Error(rc, last_error())
    return rc


def version():
    """DS4TP_VERSION_HEX of the linked library: (major<<16)|(minor<<8)|patch."""
    return _lib().ds4tp_version()


def version_string():
    """"MAJOR.MINOR.PATCH" of the linked library."""
    return _text(_lib().ds4tp_version_string())


def protocol_version():
    """Wire protocol version the linked library speaks."""
    return _lib().ds4tp_protocol_version()


def strerror(status):
    """Short description of a status code."""
    return _text(_lib().ds4tp_strerror(int(status)))


def err_name(status):
    """Symbolic name of a status code ("DS4TP_ETIMEDOUT")."""
    return _text(_lib().ds4tp_err_name(int(status)))


def last_error():
    """Message of the last failed call made by this thread ("" if none)."""
    return _text(_lib().ds4tp_last_error())


def transport_name(transport):
    """Lower-case name of a transport value ("tcp"); "?" when unknown."""
    return _text(_lib().ds4tp_transport_name(int(transport)))


def transport_available(transport):
    """(available, why): whether ``transport`` can run on this host, and
    what was found or what is missing. No network I/O."""
    why = ctypes.create_string_buffer(512)
    ok = _lib().ds4tp_transport_available(int(transport), why, len(why))
    return bool(ok), _text(why.value)


def command_name(kind):
    """Upper-case name of a command kind or control frame type ("EVAL")."""
    return _text(_lib().ds4tp_command_name(int(kind)))


def schedule_slot(identity, seq):
    """Slot row gate ``seq`` must hit under ``identity``'s schedule; -1 when
    seq is 0 or the identity is invalid."""
    return _lib().ds4tp_schedule_slot(ctypes.byref(identity), seq)


def slab_layout(identity):
    """The :class:`SlabLayout` for ``identity`` (pure). Raises Error(EINVAL)."""
    layout = SlabLayout()
    _check(_lib().ds4tp_slab_layout_compute(ctypes.byref(identity), ctypes.byref(layout)))
    return layout


_NO_OFFSET = (1 << 64) - 1


def _memory_view(address, nbytes):
    """A writable 'B' memoryview over raw memory the library owns."""
    fn = ctypes.pythonapi.PyMemoryView_FromMemory
    fn.restype = ctypes.py_object
    fn.argtypes = [c_void_p, ctypes.c_ssize_t, c_int]
    return fn(address, nbytes, 0x200)  # PyBUF_WRITE


def _buffer_address(obj, writable):
    """(address, nbytes, keepalive) of a contiguous bytes-like object."""
    if isinstance(obj, bytes) and not writable:
        return ctypes.cast(c_char_p(obj), c_void_p).value or 0, len(obj), obj
    view = memoryview(obj)
    if not view.contiguous:
        raise ValueError("buffer must be contiguous")
    if view.readonly:
        if writable:
            raise TypeError("buffer must be writable (bytearray, array, mmap, memoryview of one)")
        copy = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
        return ctypes.addressof(copy), view.nbytes, copy
    holder = (ctypes.c_char * view.nbytes).from_buffer(view.cast("B"))
    return ctypes.addressof(holder), view.nbytes, holder


def _int32s(values):
    """A ctypes int32 array of ``values`` (and its length)."""
    values = list(values)
    return (c_int32 * max(len(values), 1))(*values), len(values)


def _items(items):
    """A ctypes BatchItem array from BatchItems or (session_id, token) pairs."""
    items = [it if isinstance(it, BatchItem) else BatchItem(*it) for it in items]
    return (BatchItem * max(len(items), 1))(*items), len(items)


def _floats(values):
    """(address, count, keepalive) of float32 data: a float32 buffer as is,
    anything else converted."""
    try:
        view = memoryview(values)
        if view.format == "f" and view.contiguous:
            address, _, keep = _buffer_address(values, writable=False)
            return address, view.nbytes // 4, keep
    except TypeError:
        pass
    arr = array.array("f", values)
    return arr.buffer_info()[0], len(arr), arr


# ---------------------------------------------------------------------------
# The pair.

class Pair:
    """One ds4tp_pair (rank 0 = leader, rank 1 = worker).

    ``Pair(options, identity)`` validates both and, for a leader, binds the
    listener (``listen_port`` is valid at once). Use it as a context manager
    or call :meth:`close`. Views returned by :attr:`slab`, :meth:`out_vector`
    and friends point into the slab and are released by :meth:`detach_slab`
    and :meth:`close`; do not keep slices of them beyond that.
    """

    def __init__(self, options, identity):
        self._h = None
        self._views = []
        self._slab_keep = None
        self._hooks = None
        self._hook_error = None
        self._options = options  # keeps the log callback alive
        handle = c_void_p()
        _check(_lib().ds4tp_new(ctypes.byref(handle), ctypes.byref(options),
                                ctypes.byref(identity)))
        self._h = handle.value

    # -- lifetime --------------------------------------------------------

    def close(self):
        """ds4tp_free: stops everything and releases the handle (idempotent)."""
        if self._h is not None:
            self._release_views()
            _lib().ds4tp_free(self._h)
            self._h = None
            self._slab_keep = None
            self._hooks = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self):
        """The raw ds4tp_pair * (an int), e.g. as user data for the
        gate callbacks an engine's C code calls."""
        return self._live()

    def _live(self):
        if self._h is None:
            raise Error(Status.EINVAL, "the pair is closed")
        return self._h

    # -- bring-up and state ---------------------------------------------

    def connect(self):
        """Blocking bring-up (hello, identity check, transport negotiation)."""
        _check(_lib().ds4tp_connect(self._live()))

    @property
    def listen_port(self):
        """Leader: the bound port (after construction); worker: the dialed one."""
        return _lib().ds4tp_listen_port(self._live())

    @property
    def rank(self):
        """0 for the leader, 1 for the worker."""
        return _lib().ds4tp_rank(self._live())

    @property
    def transport(self):
        """Negotiated :class:`Transport` after connect (AUTO before)."""
        return Transport(_lib().ds4tp_transport_active(self._live()))

    @property
    def peer_ctx_size(self):
        """The peer's ctx_size from its hello (0 before connect)."""
        return _lib().ds4tp_peer_ctx_size(self._live())

    @property
    def failed(self):
        """True once a failure latched; every later call raises EFAILED."""
        return bool(_lib().ds4tp_failed(self._live()))

    def mark_failed(self, reason):
        """Latches failure from the engine side (e.g. a GPU error)."""
        _lib().ds4tp_mark_failed(self._live(), reason.encode())

    @property
    def errmsg(self):
        """Message of the handle's last failed call ("" if none)."""
        return _text(_lib().ds4tp_errmsg(self._live()))

    # -- slab -------------------------------------------------------------

    def layout(self):
        """This pair's :class:`SlabLayout`."""
        layout = SlabLayout()
        _check(_lib().ds4tp_slab_layout_get(self._live(), ctypes.byref(layout)))
        return layout

    @property
    def slab_bytes(self):
        """Total slab bytes."""
        return _lib().ds4tp_slab_bytes(self._live())

    def out_offset(self, layer, gate):
        """Slab offset of out[layer][gate] (raises for out of range)."""
        return self._offset(_lib().ds4tp_slab_out_offset(self._live(), layer, gate),
                            f"out vector (layer {layer}, gate {gate})")

    def in_offset(self, layer, gate):
        """Slab offset of in[layer][gate]."""
        return self._offset(_lib().ds4tp_slab_in_offset(self._live(), layer, gate),
                            f"in vector (layer {layer}, gate {gate})")

    def batch_out_offset(self, index):
        """Slab offset of row 0 of batch gate ``index``'s out rows."""
        return self._offset(_lib().ds4tp_slab_batch_out_offset(self._live(), index),
                            f"batch gate {index}")

    def batch_in_offset(self, index):
        """Slab offset of row 0 of batch gate ``index``'s in rows."""
        return self._offset(_lib().ds4tp_slab_batch_in_offset(self._live(), index),
                            f"batch gate {index}")

    def gpu_flags_offset(self):
        """Slab offset of the engine's per-slot "gate reached" words."""
        return self._offset(_lib().ds4tp_slab_gpu_flags_offset(self._live()), "gpu flags")

    def _offset(self, off, what):
        if off == _NO_OFFSET:
            layout = self.layout()
            raise Error(Status.EINVAL, f"{what} is outside this pair's slab "
                        f"({layout.slots // 2} layers, {layout.batch_gates} batch gates)")
        return off

    def attach_slab(self, buffer=None):
        """Hands the slab to the transport.

        ``buffer=None``: the library allocates a zeroed, page-aligned slab.
        Else a writable, 64-byte aligned buffer of at least ``slab_bytes``
        (e.g. ``mmap.mmap(-1, pair.slab_bytes)``), kept alive until
        detach/close.
        """
        if buffer is None:
            _check(_lib().ds4tp_attach_slab(self._live(), None, 0))
            return
        address, nbytes, keep = _buffer_address(buffer, writable=True)
        _check(_lib().ds4tp_attach_slab(self._live(), address, nbytes))
        self._slab_keep = keep

    def detach_slab(self):
        """Stops the data plane and forgets the slab (releases our views)."""
        self._release_views()
        _lib().ds4tp_detach_slab(self._live())
        self._slab_keep = None

    @property
    def slab_base(self):
        """Address of the attached slab, or None."""
        return _lib().ds4tp_slab_base(self._live())

    @property
    def slab(self):
        """The whole attached slab as a writable memoryview of bytes."""
        return self._view(0, self.slab_bytes, "B")

    def out_vector(self, layer, gate):
        """This rank's partial for (layer, gate): memoryview of n_embd float32."""
        return self._view(self.out_offset(layer, gate), self.layout().vec_bytes, "f")

    def in_vector(self, layer, gate):
        """The peer's partial for (layer, gate), valid after the exchange."""
        return self._view(self.in_offset(layer, gate), self.layout().vec_bytes, "f")

    def batch_out_row(self, index, row):
        """Row ``row`` of batch gate ``index``'s out rows (float32)."""
        return self._row(self.batch_out_offset(index), index, row)

    def batch_in_row(self, index, row):
        """Row ``row`` of batch gate ``index``'s in rows (float32)."""
        return self._row(self.batch_in_offset(index), index, row)

    def view(self, offset, nbytes, fmt="B"):
        """A memoryview of ``nbytes`` at slab ``offset`` cast to ``fmt``
        (struct format, e.g. "Q" for the u64 flag words)."""
        if offset + nbytes > self.slab_bytes:
            raise Error(Status.EINVAL, f"bytes {offset}..{offset + nbytes} are outside the "
                        f"{self.slab_bytes}-byte slab")
        return self._view(offset, nbytes, fmt)

    def _row(self, base, index, row):
        layout = self.layout()
        if not 0 <= row < layout.batch_rows:
            raise Error(Status.EINVAL, f"batch gate {index} row {row} outside 0..{layout.batch_rows - 1}")
        return self._view(base + row * layout.vec_stride, layout.vec_bytes, "f")

    def _view(self, offset, nbytes, fmt):
        base = self.slab_base
        if not base:
            raise Error(Status.ESTATE, "no slab attached: call attach_slab first")
        raw = _memory_view(base + offset, nbytes)
        view = raw.cast(fmt) if fmt != "B" else raw
        if view is not raw:
            raw.release()
        self._views = [r for r in self._views if r() is not None]
        self._views.append(weakref.ref(view))
        return view

    def _release_views(self):
        for ref in self._views:
            view = ref()
            if view is not None:
                try:
                    view.release()
                except BufferError:
                    pass
        self._views = []

    # -- data plane -------------------------------------------------------

    def gate_exchange(self, layer, gate, seq):
        """Sends out[layer][gate], waits for the peer's into in[layer][gate].
        Row gate seqs start at 1 and rise by one."""
        self._gate(_lib().ds4tp_gate_exchange(self._live(), layer, gate, seq))

    def batch_gate_exchange(self, index, rows, seq):
        """Swaps ``rows`` (1..BATCH_MAX_ROWS) rows of batch gate ``index``."""
        self._gate(_lib().ds4tp_batch_gate_exchange(self._live(), index, rows, seq))

    def big_gate_exchange(self, layer, seq, out, into):
        """Sends bytes-like ``out`` and receives the peer's payload of the same
        size into the writable buffer ``into``."""
        out_addr, out_n, keep_out = _buffer_address(out, writable=False)
        in_addr, in_n, keep_in = _buffer_address(into, writable=True)
        if out_n != in_n:
            raise Error(Status.EINVAL, f"big gate: out has {out_n} bytes but into has {in_n}; "
                        "both ranks swap equal sizes")
        rc = _lib().ds4tp_big_gate_exchange(self._live(), layer, seq, out_addr or None,
                                            in_addr or None, out_n)
        del keep_out, keep_in
        self._gate(rc)

    def _gate(self, rc):
        if rc != Status.OK:
            err = Error(rc, last_error())
            cause, self._hook_error = self._hook_error, None
            raise err from cause

    # -- engine integration ---------------------------------------------

    def gate_callback(self, layer, gate, seq):
        """ds4tp_gate_callback: the gate in callback shape; True on success,
        False on failure (which latches the pair failed; see errmsg)."""
        return bool(_lib().ds4tp_gate_callback(self._live(), layer, gate, seq))

    def batch_gate_callback(self, index, rows, seq):
        """ds4tp_batch_gate_callback; True on success."""
        return bool(_lib().ds4tp_batch_gate_callback(self._live(), index, rows, seq))

    def big_gate_callback(self, layer, seq, out, into):
        """ds4tp_big_gate_callback; True on success."""
        out_addr, out_n, keep_out = _buffer_address(out, writable=False)
        in_addr, in_n, keep_in = _buffer_address(into, writable=True)
        if out_n != in_n:
            raise Error(Status.EINVAL, f"big gate: out has {out_n} bytes but into has {in_n}")
        ok = _lib().ds4tp_big_gate_callback(self._live(), layer, seq, out_addr or None,
                                            in_addr or None, out_n)
        del keep_out, keep_in
        return bool(ok)

    @staticmethod
    def callback_pointers():
        """C addresses of ds4tp_gate_callback, ds4tp_batch_gate_callback and
        ds4tp_big_gate_callback, for engine code that takes a ds4tp_*_fn plus
        ``pair.handle`` as its user data."""
        lib = _lib()
        return {name: ctypes.cast(getattr(lib, "ds4tp_" + name), c_void_p).value
                for name in ("gate_callback", "batch_gate_callback", "big_gate_callback")}

    def set_staging_hooks(self, before=None, after=None):
        """Installs staging hooks (both None removes them).

        ``before(kind, a, b, seq, slab_out)`` fills the memoryview slab_out
        (this rank's partial) before the exchange; ``after(kind, a, b, seq,
        slab_in)`` reads the peer's partial after it. kind is STAGE_ROW
        (a=layer, b=gate) or STAGE_BATCH (a=index, b=rows). Return None or 0
        for success; another int or an exception fails the gate with EIO (the
        exception becomes the Error's __cause__). They run on the gate
        thread and must not call into the library.
        """
        if before is None and after is None:
            _check(_lib().ds4tp_set_staging_hooks(self._live(), None))
            self._hooks = None
            return

        def wrap(fn, fn_type):
            if fn is None:
                return fn_type()

            def trampoline(_user_data, kind, a, b, seq, ptr, nbytes):
                view = _memory_view(ptr, nbytes)
                try:
                    rc = fn(kind, a, b, seq, view)
                    return 0 if rc is None else int(rc)
                except BaseException as e:  # reported through the gate's Error
                    self._hook_error = e
                    return -1
                finally:
                    view.release()

            return fn_type(trampoline)

        hooks = StagingHooks(before_exchange=wrap(before, STAGE_BEFORE_FN),
                             after_exchange=wrap(after, STAGE_AFTER_FN))
        _check(_lib().ds4tp_set_staging_hooks(self._live(), ctypes.byref(hooks)))
        self._hooks = hooks  # the C side keeps the function pointers

    def gate_service_start(self, options=None):
        """Starts the library's gate service thread (defaults when None)."""
        ref = ctypes.byref(options) if options is not None else None
        _check(_lib().ds4tp_gate_service_start(self._live(), ref))

    def gate_service_stop(self):
        """Stops the gate service and joins its thread (ETIMEDOUT: call again)."""
        _check(_lib().ds4tp_gate_service_stop(self._live()))

    @property
    def gate_service_state(self):
        """:class:`ServiceState` of the gate service."""
        return ServiceState(_lib().ds4tp_gate_service_state(self._live()))

    @property
    def gate_seq(self):
        """The last row gate seq the pair completed (or the service released)."""
        return _lib().ds4tp_gate_seq(self._live())

    def gate_ready(self, slot, seq):
        """Stores ``seq`` into ready[slot] (the engine's word for the gate
        service): one aligned 8-byte store. Python has no release store: the
        slab writes before it are ordered by the CPU on x86-64 (TSO), not on
        weakly ordered CPUs (arm64), where Python should drive gates with
        gate_exchange instead."""
        c_uint64.from_address(self._flag_address("gpu_flags_offset", slot)).value = seq

    def gate_released(self, slot):
        """Reads release[slot] (the service's word): the last seq whose peer
        partial landed in in[slot], GATE_POISON after a failure."""
        return c_uint64.from_address(self._flag_address("gpu_release_offset", slot)).value

    def _flag_address(self, region, slot):
        layout = self.layout()
        if not 0 <= slot < layout.slots:
            raise Error(Status.EINVAL, f"slot {slot} outside 0..{layout.slots - 1}")
        base = self.slab_base
        if not base:
            raise Error(Status.ESTATE, "no slab attached: call attach_slab first")
        return base + getattr(layout, region) + slot * layout.flag_stride

    # -- control plane: leader commands ---------------------------------------
    # Each returns once the frame is written (see ds4tp.h for the replies
    # each command is owed); logits_floats is the size of the worker's
    # logits half to read per row, 0 for none.

    def send_session_create(self, session_id, ctx_size):
        """SESSION_CREATE; then wait_ack."""
        _check(_lib().ds4tp_send_session_create(self._live(), session_id, ctx_size))

    def send_session_destroy(self, session_id):
        """SESSION_DESTROY; then wait_ack."""
        _check(_lib().ds4tp_send_session_destroy(self._live(), session_id))

    def send_sync(self, session_id, tokens, logits_floats=0):
        """SYNC: the session's tokens become exactly ``tokens``; then wait_sync."""
        arr, n = _int32s(tokens)
        _check(_lib().ds4tp_send_sync(self._live(), session_id, arr, n, logits_floats))

    def send_sync_images(self, session_id, tokens, images, logits_floats=0):
        """SYNC_IMAGES with :class:`Image` embeddings; then wait_sync."""
        arr, n = _int32s(tokens)
        spans = (ImageSpan * max(len(images), 1))()
        keep = []
        for span, im in zip(spans, images):
            for name in ("token_start", "token_count", "data_width", "width", "height",
                         "content_width", "content_height"):
                setattr(span, name, getattr(im, name))
            fp = bytes(im.fingerprint)[:IMAGE_FINGERPRINT_BYTES]
            ctypes.memmove(span.fingerprint, fp, len(fp))
            address, _, k = _floats(im.embd)
            keep.append(k)
            span.embd = ctypes.cast(address, POINTER(ctypes.c_float))
        _check(_lib().ds4tp_send_sync_images(self._live(), session_id, arr, n, spans, len(images),
                                             logits_floats))

    def send_eval(self, session_id, seq, token, logits_floats=0):
        """EVAL: one decode step; ``seq`` rises with every EVAL and MTP."""
        _check(_lib().ds4tp_send_eval(self._live(), session_id, seq, token, logits_floats))

    def send_mtp(self, session_id, seq, token, limit):
        """MTP: a multi-token-prediction cycle of up to ``limit`` drafts; then wait_ack."""
        _check(_lib().ds4tp_send_mtp(self._live(), session_id, seq, token, limit))

    def send_rewind(self, session_id, pos):
        """REWIND to ``pos`` (no reply)."""
        _check(_lib().ds4tp_send_rewind(self._live(), session_id, pos))

    def send_invalidate(self, session_id):
        """INVALIDATE (no reply)."""
        _check(_lib().ds4tp_send_invalidate(self._live(), session_id))

    def send_spec_restore(self, session_id, pos):
        """SPEC_RESTORE to ``pos``; then wait_ack (ACK_UNAVAILABLE: sync in full)."""
        _check(_lib().ds4tp_send_spec_restore(self._live(), session_id, pos))

    def send_eval_batch(self, items, logits_floats=0):
        """EVAL_BATCH of BatchItems or (session_id, token) pairs; then wait_ack(0)."""
        arr, n = _items(items)
        _check(_lib().ds4tp_send_eval_batch(self._live(), arr, n, logits_floats))

    def send_mixed_batch(self, prefill_session_id, prompt, items, logits_floats=0):
        """MIXED_BATCH: a prefill chunk plus one decode step per item; then wait_ack."""
        parr, pn = _int32s(prompt)
        iarr, n = _items(items)
        _check(_lib().ds4tp_send_mixed_batch(self._live(), prefill_session_id, parr, pn, iarr, n,
                                             logits_floats))

    def send_verify(self, session_id, drafts, flags=0):
        """VERIFY: announces a verify block of the drafts (VERIFY_* flags)."""
        arr, n = _int32s(drafts)
        _check(_lib().ds4tp_send_verify(self._live(), session_id, arr, n, flags))

    def send_verify_commit(self, mode, count, logits_floats=0):
        """VERIFY_COMMIT: the decision (:class:`CommitMode`) on the open block."""
        _check(_lib().ds4tp_send_verify_commit(self._live(), int(mode), count, logits_floats))

    def send_draft(self, session_id, token, pos, mode):
        """DRAFT: a lockstep drafter step (:class:`DraftMode`)."""
        _check(_lib().ds4tp_send_draft(self._live(), session_id, token, pos, int(mode)))

    def send_stop(self):
        """STOP: ends the lockstep; the worker loop returns."""
        _check(_lib().ds4tp_send_stop(self._live()))

    # -- control plane: leader replies ----------------------------------------

    def wait_ack(self, session_id):
        """Reads the COMMAND_ACK of the last command for ``session_id`` (0 for
        EVAL_BATCH) and returns its status (>= 0). A worker failure raises
        Error(EREMOTE); see :attr:`remote_status`."""
        status = c_int32(0)
        _check(_lib().ds4tp_wait_ack(self._live(), session_id, ctypes.byref(status)))
        return status.value

    def wait_sync(self, session_id):
        """Reads the SYNC_ACK of the last SYNC*: (status, position)."""
        status, position = c_int32(0), c_uint32(0)
        _check(_lib().ds4tp_wait_sync(self._live(), session_id, ctypes.byref(status),
                                      ctypes.byref(position)))
        return status.value, position.value

    def recv_logits(self, count, into=None):
        """Reads the next logits half (``count`` floats) into the writable
        float32 buffer ``into``, or a new array('f'), which it returns."""
        if into is None:
            into = array.array("f", bytes(count * 4))
        address, nbytes, keep = _buffer_address(into, writable=True)
        if nbytes < count * 4:
            raise Error(Status.EINVAL, f"recv_logits: buffer holds {nbytes // 4} floats, "
                        f"{count} needed")
        _check(_lib().ds4tp_recv_logits(self._live(), address, count))
        del keep
        return into

    @property
    def remote_status(self):
        """The status the worker reported with its failure (0 if none)."""
        return _lib().ds4tp_remote_status(self._live())

    # -- control plane: both ranks --------------------------------------------

    def hash_check(self, session_id, seq, hash):
        """Lockstep state hash check; raises Error(EDIVERGED) when the hashes
        differ (the pair stays usable)."""
        _check(_lib().ds4tp_hash_check(self._live(), session_id, seq, hash))

    def sync_checkpoint(self, point, current, total, requested=False):
        """Agreed cancellation at a prefill boundary: True when either rank
        requested it."""
        cancelled = c_int(0)
        _check(_lib().ds4tp_sync_checkpoint(self._live(), point, current, total,
                                            1 if requested else 0, ctypes.byref(cancelled)))
        return bool(cancelled.value)

    def agree_execution_mode(self, flags, caps=0):
        """Start-up agreement: ``flags`` must match the peer's; returns the
        intersection of both ranks' ``caps``."""
        c = c_uint32(caps)
        _check(_lib().ds4tp_agree_execution_mode(self._live(), flags, ctypes.byref(c)))
        return c.value

    def agree_drafter_split(self, mine_on, meta=None):
        """Start-up agreement of the split drafter: (agreed, peer_on). ``meta``
        is DRAFTER_META_BYTES bytes (None = zeros)."""
        if meta is not None and len(meta) != DRAFTER_META_BYTES:
            raise Error(Status.EINVAL, f"drafter meta must be {DRAFTER_META_BYTES} bytes, "
                        f"got {len(meta)}")
        buf = ctypes.create_string_buffer(bytes(meta), DRAFTER_META_BYTES) if meta else None
        agreed, peer_on = c_int(0), c_int(0)
        _check(_lib().ds4tp_agree_drafter_split(self._live(), 1 if mine_on else 0, buf,
                                                ctypes.byref(agreed), ctypes.byref(peer_on)))
        return bool(agreed.value), bool(peer_on.value)

    def block_begin(self, rows, n_layers, gates_per_layer=1):
        """Verify block begin (both ranks); returns the agreed gates per layer."""
        gpl = c_uint32(gates_per_layer)
        _check(_lib().ds4tp_block_begin(self._live(), rows, n_layers, ctypes.byref(gpl)))
        return gpl.value

    def block_end(self):
        """Verify block end (both ranks)."""
        _check(_lib().ds4tp_block_end(self._live()))

    def small_exchange(self, mine):
        """Swaps len(mine) (1..SMALL_EXCHANGE_MAX) bytes with the peer; returns its bytes."""
        mine = bytes(mine)
        peer = ctypes.create_string_buffer(max(len(mine), 1))
        _check(_lib().ds4tp_small_exchange(self._live(), mine, peer, len(mine)))
        return peer.raw[:len(mine)]

    def head_row_send(self, row, floats):
        """Worker -> leader output-head row of the current verify block."""
        address, n, keep = _floats(floats)
        _check(_lib().ds4tp_head_row_send(self._live(), row, address, n))
        del keep

    def head_row_recv(self, row, count):
        """Leader: receives head row ``row`` (``count`` floats) as array('f')."""
        out = array.array("f", bytes(count * 4))
        _check(_lib().ds4tp_head_row_recv(self._live(), row, out.buffer_info()[0], count))
        return out

    # -- control plane: worker --------------------------------------------------

    def recv_command(self, timeout_ms=WAIT_FOREVER):
        """Waits for the next command and returns it as a :class:`Command`."""
        raw = _CommandStruct()
        _lib().ds4tp_command_init(ctypes.byref(raw))
        try:
            _check(_lib().ds4tp_recv_command(self._live(), ctypes.byref(raw), timeout_ms))
            return Command(raw)
        finally:
            _lib().ds4tp_command_free(ctypes.byref(raw))

    def send_ack(self, status=ACK_DONE):
        """COMMAND_ACK for the last command."""
        _check(_lib().ds4tp_send_ack(self._live(), status))

    def send_sync_ack(self, status, position):
        """SYNC_ACK: status and the tokens the session holds now."""
        _check(_lib().ds4tp_send_sync_ack(self._live(), status, position))

    def send_logits(self, floats):
        """One logits half (the command's logits_floats values)."""
        address, n, keep = _floats(floats)
        _check(_lib().ds4tp_send_logits(self._live(), address, n))
        del keep

    def send_error(self, status, message):
        """Reports that the last command failed; the worker takes no more."""
        _check(_lib().ds4tp_send_error(self._live(), status, message.encode()))

    def worker_run(self, handler):
        """Serves commands until STOP (returns) or a failure (raises Error).

        ``handler`` has a method per command kind (``session_create``,
        ``sync``, ``eval``, ... ``hash``: the ds4tp_worker_ops names), each
        called as ``method(pair, command, reply)`` with a :class:`Command` and
        a :class:`Reply`; it returns None/0, a positive ack status, or a
        negative engine status to fail. A kind without a method is reported
        unsupported. An exception fails the command (status -1, its text as
        the message) and becomes the raised Error's __cause__.
        """
        ops = WorkerOps()
        keep = []
        failure = []

        def bind(fn):
            def trampoline(_user_data, _pair, cmd_p, reply_p):
                reply = Reply(reply_p.contents)
                try:
                    rc = fn(self, Command(cmd_p.contents), reply)
                    return 0 if rc is None else int(rc)
                except BaseException as e:  # reported to the leader, re-raised below
                    failure.append(e)
                    reply.message = f"python {type(e).__name__}: {e}"
                    return -1
                finally:
                    reply._release()
            cb = COMMAND_FN(trampoline)
            keep.append(cb)
            return cb

        for name in WORKER_OPS:
            fn = getattr(handler, name, None)
            if fn is not None:
                setattr(ops, name, bind(lambda pair, cmd, reply, fn=fn: fn(pair, cmd, reply)))
        rc = _lib().ds4tp_worker_run(self._live(), ctypes.byref(ops), None)
        if rc != Status.OK:
            raise Error(rc, last_error()) from (failure[0] if failure else None)

    def __repr__(self):
        if self._h is None:
            return "<ds4tp.Pair closed>"
        return f"<ds4tp.Pair rank {self.rank} transport {transport_name(self.transport)}>"
