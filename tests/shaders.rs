//! Every variant of every `shaders/*.wgsl` parses and validates under naga (the WGSL front-end
//! wgpu uses), with no GPU: a shader error fails here, not at pipeline creation on a user's
//! machine, and a variant for an adapter feature this machine's GPU lacks is still checked.
//! Each variant is validated with only the capabilities its features give, so the f32 one is
//! proved to need neither `shader-f16` nor subgroups (SwiftShader has neither).
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::path::Path;

// The preprocessor the GPU context builds pipelines with; it uses only std, so the test runs
// without the `gpu` feature.
#[path = "../src/gpu/variant.rs"]
mod variant;

use variant::{specialize, Variant};

/// Every shader's file name and source.
fn shaders() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut shaders = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("shaders/ exists") {
        let path = entry.expect("readable entry").path();
        if path.extension().is_none_or(|e| e != "wgsl") {
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("readable shader");
        shaders.push((path.display().to_string(), source));
    }
    assert!(!shaders.is_empty(), "no shaders found in {}", dir.display());
    shaders.sort();
    shaders
}

/// The variant's source, parsed and validated with exactly the capabilities it may use.
fn validate(name: &str, source: &str, v: Variant) -> (String, naga::Module) {
    let what = format!("{name} ({})", v.name());
    let text = specialize(source, v).unwrap_or_else(|e| panic!("{what}: {e}"));
    let module = naga::front::wgsl::parse_str(&text)
        .unwrap_or_else(|e| panic!("{}", e.emit_to_string_with_path(&text, &what)));
    // unpack2x16float is core WGSL (WebGPU always has it); naga gates it behind this
    // capability only for downlevel GL targets we do not run on.
    let mut capabilities = naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if v.f16 {
        capabilities |= naga::valid::Capabilities::SHADER_FLOAT16;
    }
    if v.subgroups {
        capabilities |= naga::valid::Capabilities::SUBGROUP;
    }
    let mut validator =
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities);
    if v.subgroups {
        validator
            .subgroup_stages(naga::valid::ShaderStages::COMPUTE)
            .subgroup_operations(naga::valid::SubgroupOperationSet::all());
    }
    validator
        .validate(&module)
        .unwrap_or_else(|e| panic!("{}", e.emit_to_string_with_path(&text, &what)));
    (text, module)
}

#[test]
fn every_variant_of_every_shader_validates_with_naga() {
    let mut checked = 0;
    for (name, source) in shaders() {
        for v in Variant::ALL {
            let (_, module) = validate(&name, &source, v);
            assert!(
                module
                    .entry_points
                    .iter()
                    .all(|e| e.stage == naga::ShaderStage::Compute),
                "{name}: only compute entry points belong in shaders/"
            );
            checked += 1;
        }
    }
    assert!(checked >= 4 * 10, "only {checked} shader variants checked");
}

#[test]
fn the_hot_kernels_have_a_subgroup_variant() {
    // The decode step's reductions: a variant that silently equals the f32 source would
    // make the GPU tests compare the f32 path with itself.
    let hot = ["attention", "matvec", "rms_norm", "sample"];
    for (name, source) in shaders() {
        let stem = Path::new(&name)
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let plain = specialize(&source, Variant::default()).unwrap();
        let subgroups = specialize(
            &source,
            Variant {
                subgroups: true,
                ..Variant::default()
            },
        )
        .unwrap();
        assert_eq!(
            hot.contains(&stem.as_str()),
            plain != subgroups,
            "{name}: has a subgroup variant unlike the hot kernels' list"
        );
        if plain != subgroups {
            assert!(subgroups.contains("subgroupAdd") || subgroups.contains("subgroupMax"));
        }
    }
}

#[test]
fn the_kv_cache_kernels_have_an_f16_variant() {
    // `shader-f16` stores the KV cache as f16: the kernel that writes it and the one that
    // reads it must both change, and nothing else (the rest of the forward pass is f32 on
    // every device, so its tolerances hold unchanged).
    let f16_kernels = ["attention", "kv_store"];
    for (name, source) in shaders() {
        let stem = Path::new(&name).file_stem().unwrap().to_str().unwrap();
        let plain = specialize(&source, Variant::default()).unwrap();
        let f16 = specialize(
            &source,
            Variant {
                f16: true,
                ..Variant::default()
            },
        )
        .unwrap();
        assert_eq!(
            f16_kernels.contains(&stem),
            plain != f16,
            "{name}: has an f16 variant unlike the KV cache kernels' list"
        );
        if plain != f16 {
            assert!(f16.contains("enable f16;") && f16.contains("array<KvElement>"));
            assert!(
                !plain.contains("enable f16"),
                "{name}: the f32 variant enables f16"
            );
        }
    }
}

#[test]
fn binding_tables_match_each_header() {
    // The header comment is the contract the Rust side binds against: in every variant, each
    // binding the module declares is documented with its name and access, and nothing else.
    let row =
        regex::Regex::new(r"^//\s+(\d+)\s{2,}(\w+)\s{2,}\S+\s{2,}(read_write|read|uniform)\b")
            .unwrap();
    for (name, source) in shaders() {
        let documented: BTreeMap<u32, (String, String)> = source
            .lines()
            // The header: the leading comments (and an `enable` between directives).
            .take_while(|l| l.starts_with("//") || l.starts_with("enable "))
            .filter_map(|l| row.captures(l))
            .map(|c| (c[1].parse().unwrap(), (c[2].to_owned(), c[3].to_owned())))
            .collect();
        assert!(
            !documented.is_empty(),
            "{name}: no binding table in the header"
        );
        for v in Variant::ALL {
            let (_, module) = validate(&name, &source, v);
            let declared: BTreeMap<u32, (String, String)> = module
                .global_variables
                .iter()
                .filter_map(|(_, var)| {
                    let binding = var.binding.as_ref()?;
                    assert_eq!(binding.group, 0, "{name}: group {}", binding.group);
                    let access = match var.space {
                        naga::AddressSpace::Uniform => "uniform",
                        naga::AddressSpace::Storage { access }
                            if access.contains(naga::StorageAccess::STORE) =>
                        {
                            "read_write"
                        }
                        _ => "read",
                    };
                    Some((binding.binding, (var.name.clone()?, access.to_owned())))
                })
                .collect();
            assert_eq!(declared, documented, "{name} ({}): bindings", v.name());
        }
    }
}
