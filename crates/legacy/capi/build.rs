//! Writes include/streamline.h with cbindgen from src/ffi.rs, on every build that sees a
//! change of the crate's sources, and only when the text differs (the header is committed:
//! a change to the C interface shows in the diff next to the code that made it).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = std::path::Path::new(&dir);
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config =
        cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let bindings = match cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
    {
        Ok(b) => b,
        Err(e) => panic!("cbindgen could not generate streamline.h: {e}"),
    };
    let mut text = Vec::new();
    bindings.write(&mut text);
    let out = dir.join("include/streamline.h");
    if std::fs::read(&out).ok().as_deref() != Some(&text[..]) {
        std::fs::create_dir_all(dir.join("include")).expect("include/ can be made");
        std::fs::write(&out, &text).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
    }
}
