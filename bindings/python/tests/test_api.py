"""The binding against the C library without a peer: versions, status codes,
struct layouts (against the C compiler's), pure functions, argument errors."""

import ctypes
import subprocess

import pytest

import ds4tp


def c_layout(peer_exe):
    """{struct: {field: (offset, size)}, plus 'sizeof'} as the C compiler sees it."""
    out = subprocess.run([peer_exe, "layout"], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    layout = {}
    for line in out.splitlines():
        struct, field, offset, size = line.split()
        layout.setdefault(struct, {})[field] = (int(offset), int(size))
    return layout


@pytest.mark.parametrize("py, c", [(ds4tp.Options, "ds4tp_options"),
                                   (ds4tp.Identity, "ds4tp_identity"),
                                   (ds4tp.SlabLayout, "ds4tp_slab_layout"),
                                   (ds4tp.StagingHooks, "ds4tp_staging_hooks"),
                                   (ds4tp.GateServiceOptions, "ds4tp_gate_service_options"),
                                   (ds4tp.GroupOptions, "ds4tp_group_options"),
                                   (ds4tp.BatchItem, "ds4tp_batch_item"),
                                   (ds4tp.ImageSpan, "ds4tp_image_span"),
                                   (ds4tp._structs._CommandStruct, "ds4tp_command"),
                                   (ds4tp._structs._ReplyStruct, "ds4tp_reply"),
                                   (ds4tp.WorkerOps, "ds4tp_worker_ops")])
def test_struct_layout_matches_c(peer_exe, py, c):
    want = c_layout(peer_exe)[c]
    assert ctypes.sizeof(py) == want.pop("sizeof")[0]
    got = {name: (getattr(py, name).offset, getattr(py, name).size) for name, _ in py._fields_}
    assert got == want


def test_initializers_set_size_and_defaults():
    opt = ds4tp.Options()
    assert opt.size == ctypes.sizeof(ds4tp.Options)
    assert opt.role == ds4tp.Role.NONE and opt.transport == ds4tp.Transport.AUTO
    assert opt.listen_host == b"127.0.0.1" and opt.gate_timeout_ms == 750
    ident = ds4tp.Identity(n_layer=3, engine_blob=b"hash", gate_slot_mask=[1, 2])
    assert ident.size == ctypes.sizeof(ds4tp.Identity)
    assert ident.n_layer == 3 and ident.engine_blob_bytes == 4
    assert ctypes.string_at(ident.engine_blob, 4) == b"hash"
    assert list(ident.gate_slot_mask) == [1, 2, 0, 0]
    svc = ds4tp.GateServiceOptions()
    assert svc.size == ctypes.sizeof(svc) and svc.cpu == -1
    with pytest.raises(AttributeError):
        ds4tp.Options(no_such_field=1)


def test_versions():
    assert ds4tp.version() == (ds4tp.VERSION_MAJOR << 16) | (ds4tp.VERSION_MINOR << 8) | \
        ds4tp.VERSION_PATCH
    assert ds4tp.version_string() == \
        f"{ds4tp.VERSION_MAJOR}.{ds4tp.VERSION_MINOR}.{ds4tp.VERSION_PATCH}"
    assert ds4tp.protocol_version() == ds4tp.PROTOCOL_VERSION


def test_status_codes_match_the_library():
    for status in ds4tp.Status:
        assert ds4tp.err_name(status) == "DS4TP_" + status.name
        assert ds4tp.strerror(status)
    assert ds4tp.err_name(-999) == "DS4TP_UNKNOWN"


def test_command_names():
    for kind in ds4tp.CommandKind:
        assert ds4tp.command_name(kind) == kind.name
    assert ds4tp.command_name(-5) == "?"


def test_control_calls_need_a_connected_pair():
    with ds4tp.Pair(ds4tp.Options.leader(port=0), ds4tp.Identity(n_layer=1, n_embd=4)) as tp:
        with pytest.raises(ds4tp.Error) as e:
            tp.send_eval(1, 1, 5)
        assert e.value.status == ds4tp.Status.ESTATE
        with pytest.raises(ds4tp.Error) as e:
            tp.worker_run(object())
        assert e.value.status == ds4tp.Status.ESTATE
        with pytest.raises(ds4tp.Error, match="drafter meta"):
            tp.agree_drafter_split(True, b"short")


def test_transport_names_and_availability():
    for t in ds4tp.Transport:
        assert ds4tp.transport_name(t) == t.name.lower()
    ok, why = ds4tp.transport_available(ds4tp.Transport.TCP)
    assert ok and why
    assert ds4tp.transport_available(ds4tp.Transport.AUTO)[0] is False


def test_transport_auto_follows_what_this_host_offers():
    def ok(t):
        return ds4tp.transport_available(t)[0]
    rdma_or_tcp = ds4tp.Transport.RDMA if ok(ds4tp.Transport.RDMA) else ds4tp.Transport.TCP
    same = ds4tp.Transport.SHM if ok(ds4tp.Transport.SHM) else rdma_or_tcp
    assert ds4tp.transport_auto(True) == same
    assert ds4tp.transport_auto(False) == rdma_or_tcp
    assert isinstance(ds4tp.transport_auto(False), ds4tp.Transport)


def test_schedule_and_layout():
    ident = ds4tp.Identity(n_layer=4, n_embd=256)
    assert [ds4tp.schedule_slot(ident, s) for s in (1, 2, 8, 9)] == [0, 1, 7, 0]
    assert ds4tp.schedule_slot(ident, 0) == -1
    ident.gates_per_token, ident.gate_slot_start, ident.gate_slot_step = 2, 1, 2
    assert [ds4tp.schedule_slot(ident, s) for s in (1, 2, 3)] == [1, 3, 1]
    layout = ds4tp.slab_layout(ds4tp.Identity(n_layer=4, n_embd=256))
    assert layout.slots == 8 and layout.vec_bytes == 1024
    assert layout.batch_rows == ds4tp.BATCH_MAX_ROWS
    assert layout.out_offset % 64 == 0 and layout.vec_stride % 64 == 0
    assert layout.slot_stride == layout.vec_stride + 64
    with pytest.raises(ds4tp.Error) as e:
        ds4tp.slab_layout(ds4tp.Identity())
    assert e.value.status == ds4tp.Status.EINVAL


def test_bad_options_raise_with_the_library_message():
    with pytest.raises(ds4tp.Error) as e:
        ds4tp.Pair(ds4tp.Options(), ds4tp.Identity(n_layer=1, n_embd=4))
    assert e.value.status == ds4tp.Status.EINVAL
    assert e.value.name == "DS4TP_EINVAL"
    assert "role" in e.value.message
    assert "role" in ds4tp.last_error()
    with pytest.raises(ds4tp.Error, match="leader_port"):
        ds4tp.Pair(ds4tp.Options(role=ds4tp.Role.WORKER), ds4tp.Identity(n_layer=1, n_embd=4))


def test_leader_handle_queries_and_close():
    logged = []
    opt = ds4tp.Options.leader(port=0, log=lambda level, msg: logged.append((level, msg)),
                               log_level=ds4tp.LogLevel.DEBUG)
    with ds4tp.Pair(opt, ds4tp.Identity(n_layer=2, n_embd=64)) as tp:
        assert 0 < tp.listen_port < 65536
        assert tp.rank == 0 and tp.transport == ds4tp.Transport.AUTO
        assert not tp.failed and tp.errmsg == "" and tp.peer_ctx_size == 0
        layout = tp.layout()
        assert tp.slab_bytes == layout.total_bytes
        assert tp.out_offset(1, ds4tp.GATE_FFN) == layout.out_offset + 3 * layout.slot_stride
        assert tp.in_offset(0, 0) == layout.in_offset
        assert tp.batch_out_offset(3) == layout.batch_out_offset + 3 * layout.batch_gate_stride
        assert tp.batch_in_offset(0) == layout.batch_in_offset
        assert tp.gpu_flags_offset() == layout.gpu_flags_offset
        with pytest.raises(ds4tp.Error, match="outside"):
            tp.out_offset(2, 0)
        with pytest.raises(ds4tp.Error) as e:
            tp.out_vector(0, 0)  # no slab yet
        assert e.value.status == ds4tp.Status.ESTATE
        with pytest.raises(ds4tp.Error) as e:
            tp.gate_exchange(0, 0, 1)  # not connected
        assert e.value.status == ds4tp.Status.ESTATE
        tp.mark_failed("engine lost its GPU")
        assert tp.failed
        with pytest.raises(ds4tp.Error) as e:
            tp.connect()
        assert e.value.status == ds4tp.Status.EFAILED
        assert "engine lost its GPU" in e.value.message
    assert repr(tp) == "<ds4tp.Pair closed>"
    with pytest.raises(ds4tp.Error, match="closed"):
        tp.rank
    assert any("listen" in msg for _, msg in logged), logged
