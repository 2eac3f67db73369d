"""Versions, status codes and the header's constants and enums."""

import enum

# ---------------------------------------------------------------------------
# Versions and status codes (mirrors of the header's macros; the tests check
# them against the linked library).

VERSION_MAJOR, VERSION_MINOR, VERSION_PATCH = 0, 1, 0
PROTOCOL_VERSION = 3


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
SPIN_ADAPTIVE = -1        # spin_us: learn the spin (the default)
SPIN_ALWAYS = -2          # spin_us: spin without limit while the peer is alive
SPIN_NEVER = -3           # spin_us: never spin or yield, sleep at once
LINK_DATA = 0             # ds4tp_link_info.role: the data connection
LINK_RAIL = 1             # a rail (ds4tp_options.rails)
LINK_STANDBY = 2          # the standby link (ds4tp_options.failover)
ARRIVAL_UNLIMITED = -1    # peer_arrival_timeout_ms: wait while the peer is alive
OP_SUM = 0                # ds4tp_reduce_op, also ds4tp.ReduceOp
OP_MAX = 1
OP_MIN = 2
OP_PROD = 3
# ds4tp_stats.collectives / .collective: the index of each collective kind.
COLL_ALL_REDUCE = 0
COLL_ALL_GATHER = 1
COLL_BROADCAST = 2
COLL_BARRIER = 3
COLL_REDUCE_SCATTER = 4
COLL_REDUCE = 5
COLL_GATHER = 6
COLL_SCATTER = 7
COLL_ALL_GATHER_V = 8
COLL_ALL_GATHER_ROWS = 9
COLL_ALL_TO_ALL_V = 10
COLL_KINDS = 11


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
