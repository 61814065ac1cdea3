//! Every `shaders/*.wgsl` parses and validates under naga (the WGSL front-end wgpu uses),
//! with no GPU: a shader error fails here, not at pipeline creation on a user's machine.
#![cfg(not(target_arch = "wasm32"))]

use std::path::Path;

#[test]
fn every_shader_validates_with_naga() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("shaders/ exists") {
        let path = entry.expect("readable entry").path();
        if path.extension().is_none_or(|e| e != "wgsl") {
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("readable shader");
        let name = path.display().to_string();
        let module = naga::front::wgsl::parse_str(&source)
            .unwrap_or_else(|e| panic!("{}", e.emit_to_string_with_path(&source, &name)));
        // unpack2x16float is core WGSL (WebGPU always has it); naga gates it behind this
        // capability only for downlevel GL targets we do not run on.
        let capabilities = naga::valid::Capabilities::default()
            | naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}", e.emit_to_string_with_path(&source, &name)));
        assert!(
            module
                .entry_points
                .iter()
                .all(|e| e.stage == naga::ShaderStage::Compute),
            "{}: only compute entry points belong in shaders/",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 1, "no shaders found in {}", dir.display());
}

#[test]
fn apply_token_mask_binding_table_matches_header() {
    // The header comment is the contract the Rust side binds against: keep them in step.
    let source = include_str!("../shaders/apply_token_mask.wgsl");
    let module = naga::front::wgsl::parse_str(source).expect("parses");
    let mut bindings: Vec<u32> = module
        .global_variables
        .iter()
        .filter_map(|(_, var)| var.binding.as_ref().map(|b| b.binding))
        .collect();
    bindings.sort_unstable();
    assert_eq!(bindings, vec![0, 1, 2, 3, 4]);
    for binding in 0..5 {
        assert!(
            source.contains(&format!("//   {binding}  ")),
            "binding {binding} undocumented"
        );
    }
}
