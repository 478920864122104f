//! Links the kernel with its own script (link.ld): a single loadable segment at
//! 1 MiB whose file image QEMU's Multiboot loader copies as it is.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rustc-link-arg-bins=-T{dir}/link.ld");
    println!("cargo:rerun-if-changed=link.ld");
}
