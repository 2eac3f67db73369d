"""Every C function the binding calls: (name, restype, argtypes), one
block per header section, applied by the loader."""

import ctypes
from ctypes import (POINTER, c_char_p, c_int, c_int32, c_int64, c_size_t, c_uint, c_uint32,
                    c_uint64, c_void_p)

from ._structs import (BatchItem, GateServiceOptions, GroupOptions, Identity, ImageSpan, Options, SlabLayout,
                       StagingHooks, Stats, WorkerOps, _CommandStruct)

# ---------------------------------------------------------------------------
# The C functions, one block per header section: (name, restype, argtypes).

_P = c_void_p  # ds4tp_pair * (opaque)

DECLARATIONS = {
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
    "observability": [
        ("ds4tp_stats_read", c_int, [_P, POINTER(Stats)]),
        ("ds4tp_stats_reset", c_int, [_P]),
        ("ds4tp_stats_bucket_le_ns", c_uint64, [c_int]),
        ("ds4tp_stats_prometheus", c_int, [_P, c_void_p, c_size_t, POINTER(c_size_t)]),
        ("ds4tp_trace_start", c_int, [_P, c_char_p]),
        ("ds4tp_trace_write", c_int, [_P]),
        ("ds4tp_trace_merge", c_int, [c_char_p, c_char_p, c_char_p, POINTER(ctypes.c_double),
                                      POINTER(ctypes.c_double)]),
    ],
    "groups": [
        ("ds4tp_group_options_init", None, [POINTER(GroupOptions)]),
        ("ds4tp_group_new", c_int, [POINTER(c_void_p), POINTER(GroupOptions), POINTER(Identity)]),
        ("ds4tp_group_connect", c_int, [c_void_p]),
        ("ds4tp_group_new_local", c_int,
         [POINTER(c_void_p), c_int, POINTER(GroupOptions), POINTER(Identity)]),
        ("ds4tp_group_free", None, [c_void_p]),
        ("ds4tp_group_all_reduce", c_int, [c_void_p, c_void_p, c_uint64, c_int, c_int]),
        ("ds4tp_group_all_gather", c_int, [c_void_p, c_void_p, c_void_p, c_uint64]),
        ("ds4tp_group_broadcast", c_int, [c_void_p, c_void_p, c_uint64, c_int]),
        ("ds4tp_group_barrier", c_int, [c_void_p]),
        ("ds4tp_group_rank", c_int, [c_void_p]),
        ("ds4tp_group_size", c_int, [c_void_p]),
        ("ds4tp_group_transport", c_int, [c_void_p]),
        ("ds4tp_group_rendezvous_port", c_int, [c_void_p]),
        ("ds4tp_group_failed", c_int, [c_void_p]),
        ("ds4tp_group_errmsg", c_char_p, [c_void_p]),
        ("ds4tp_group_mark_failed", None, [c_void_p]),
    ],
}
