//! Sets the linker flags a Node addon needs (undefined Node-API symbols resolved at load time).
fn main() {
    napi_build::setup();
}
