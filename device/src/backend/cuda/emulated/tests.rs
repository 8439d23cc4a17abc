//! The emulated driver's own rules.

use super::super::driver::{Driver, Handle, KernelArgs, Launch, ModuleImage};
use super::{EmulatedDriver, EmulatedGpu};

fn setup() -> (EmulatedDriver, Handle, Handle, Handle) {
    let d = EmulatedDriver::new(EmulatedGpu::default());
    let ctx = d.retain_context(0).unwrap();
    let module = d.load_module(ctx, &ModuleImage::HostOnly, &[]).unwrap();
    let init = d.function(ctx, module, "rv_init_kernel").unwrap();
    (d, ctx, module, init)
}

#[test]
fn a_kernel_not_ordered_after_a_memset_on_another_stream_is_refused() {
    let (d, ctx, _, init) = setup();
    let local = d.alloc_device(ctx, 4096).unwrap();
    let (_, shared) = d.alloc_mapped(ctx, 4096).unwrap();
    let (a, b) = (d.create_stream(ctx).unwrap(), d.create_stream(ctx).unwrap());
    d.memset_zero_async(ctx, local, 4096, a).unwrap();
    let launch = |stream| Launch {
        function: init,
        grid: 1,
        threads: 32,
        args: KernelArgs::Init { shared, local },
        stream,
        cooperative: false,
    };
    let err = d.launch(ctx, &launch(b)).unwrap_err();
    assert!(err.code.contains("not ordered after it"), "{err}");
    // once the memset's stream is known to be done, any stream may use the memory
    assert!(d.stream_done(ctx, a).unwrap());
    d.launch(ctx, &launch(b)).unwrap();
    assert_eq!(d.violations().len(), 1);
}

#[test]
fn ptx_newer_than_the_jit_is_refused_with_a_log_and_a_foreign_cubin_too() {
    let (d, ctx, _, _) = setup();
    let ptx = ModuleImage::Ptx { text: b"//\n.version 9.0\n.target sm_80\n\0".to_vec() };
    let err = d.load_module(ctx, &ptx, &[]).unwrap_err();
    assert_eq!(err.code, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION");
    assert!(err.to_string().contains("Unsupported .version 9.0"), "{err}");
    let cubin = ModuleImage::Cubin { arch: (9, 0), bytes: b"\x7fELF....".to_vec() };
    assert_eq!(d.load_module(ctx, &cubin, &[]).unwrap_err().code, "CUDA_ERROR_NO_BINARY_FOR_GPU");
    assert!(d.load_module(ctx, &ModuleImage::Ptx { text: b".version 7.8\n".to_vec() }, &[]).is_ok());
}

#[test]
fn releasing_the_last_retention_counts_what_was_not_freed() {
    let (d, ctx, _, _) = setup();
    d.alloc_device(ctx, 64).unwrap();
    d.release_context(0).unwrap();
    assert_eq!((d.retained(), d.leaked()), (0, 2)); // the allocation and the module
}
