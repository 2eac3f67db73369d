//! The link works (build.rs found the library) and the declarations agree
//! with the loaded library on the basics.
use ds4tp_sys::*;
use std::ffi::CStr;

#[test]
fn linked_library_answers() {
    let v = unsafe { ds4tp_version() };
    assert_eq!(v >> 16, DS4TP_VERSION_MAJOR, "loaded library {:#x}", v);
    assert_eq!(unsafe { ds4tp_protocol_version() }, DS4TP_PROTOCOL_VERSION);
    let name = unsafe { CStr::from_ptr(ds4tp_err_name(-1)) };
    assert_eq!(name.to_str().unwrap(), "DS4TP_EINVAL");
    let mut opt = std::mem::MaybeUninit::<ds4tp_options>::zeroed();
    unsafe { ds4tp_options_init(opt.as_mut_ptr()) };
    let opt = unsafe { opt.assume_init() };
    assert_eq!(opt.size as usize, std::mem::size_of::<ds4tp_options>());
    assert_eq!(opt.role, DS4TP_ROLE_NONE);
}
