// The library answers to libpcap's soname, as the programs that load it ask for it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpcap.so.0.8");
}
