"""libds4tp for Python: a ctypes binding over the C ABI (include/ds4tp/ds4tp.h).

Standard library only (ctypes); numpy arrays and any other buffer work
wherever a vector is taken. The shared library is found, in this order, at
``$DS4TP_LIBRARY`` (a path to libds4tp.so), under the install prefixes
(``$DS4TP_PREFIX``, the prefix this package was installed into, the Python
environment's) in ``lib/``, then by the system loader (``libds4tp.so.0``);
if none loads, :class:`LibraryNotFound` names every place tried. The
library's major version must be this package's (:func:`check_version`).

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
Python thread may sit in a gate while others run. The package follows
the header: ``_declarations.py`` has one block per header section, so a
new C function is one line there plus a method; ``_structs.py`` mirrors
the C structs field for field.
"""

from ._constants import *  # noqa: F401,F403
from ._constants import (PROTOCOL_VERSION, VERSION_MAJOR, VERSION_MINOR,  # noqa: F401
                         VERSION_PATCH, CommandKind, CommitMode, DraftMode, LogLevel, Role,
                         ServiceState, Status, Transport)
from ._loader import (Error, LibraryNotFound, LibraryVersionError, check_version,  # noqa: F401
                      command_name, err_name, last_error, library_candidates, library_path,
                      protocol_version, strerror, transport_auto, transport_available,
                      transport_name, version, version_string)
from ._structs import (BatchItem, Command, GateServiceOptions, GroupOptions, Identity,  # noqa: F401
                       Image, ImageSpan, Options, Reply, SlabLayout, StagingHooks, WorkerOps,
                       schedule_slot, slab_layout)
from ._pair import Pair  # noqa: F401
from ._group import (Dtype, Group, ReduceOp, bf16_to_f32, f16_to_f32,  # noqa: F401
                     f32_to_bf16, f32_to_f16)
from ._requests import Request  # noqa: F401

__version__ = f"{VERSION_MAJOR}.{VERSION_MINOR}.{VERSION_PATCH}"

__all__ = [
    "Error", "Status", "Role", "Transport", "LogLevel", "ServiceState",
    "Options", "Identity", "SlabLayout", "StagingHooks", "GateServiceOptions",
    "Pair", "Group", "GroupOptions", "Request", "Dtype", "ReduceOp", "f32_to_f16", "f16_to_f32",
    "f32_to_bf16", "bf16_to_f32",
    "version", "version_string", "protocol_version", "strerror",
    "err_name", "last_error", "transport_name", "transport_available", "transport_auto",
    "schedule_slot", "slab_layout", "library_path", "library_candidates",
    "check_version", "LibraryNotFound", "LibraryVersionError",
    "GATE_ATTN", "GATE_FFN", "GATES_PER_LAYER", "BATCH_MAX_ROWS",
    "BATCH_GATES_PER_LAYER", "GATE_MASK_WORDS", "ENGINE_BLOB_MAX",
    "STAGE_ROW", "STAGE_BATCH", "GATE_POISON",
    "CommandKind", "CommitMode", "DraftMode", "Command", "Image", "BatchItem", "ImageSpan",
    "Reply", "WorkerOps", "command_name", "WAIT_FOREVER", "ACK_DONE", "ACK_UNAVAILABLE",
    "ACK_CANCELLED", "VERIFY_HEAD_SPLIT", "VERIFY_DRAFT_SHARED", "VERIFY_DRAFT_SEED",
    "SMALL_EXCHANGE_MAX", "HEAD_ROW_MAX", "DRAFTER_META_BYTES", "IMAGE_FINGERPRINT_BYTES",
    "MTP_LIMIT_MAX", "REPLY_MESSAGE_MAX",
]
