//! Compiles the C shim that turns libfabric's static inline calls into real functions
//! (headers from Debian's `libfabric-dev`). libfabric itself is not linked: the shim loads
//! it with dlopen on first use (see csrc/shim.c).
fn main() {
    println!("cargo:rerun-if-changed=csrc/shim.c");
    cc::Build::new()
        .file("csrc/shim.c")
        .warnings(true)
        .extra_warnings(true)
        .flag_if_supported("-Wno-unused-parameter")
        .compile("rdx_fabric_shim");
    println!("cargo:rustc-link-lib=dl");
}
