//! Kernel variants from one WGSL source. A shader marks the lines that belong to one variant
//! with comment directives, so every file stays readable WGSL:
//!
//! ```text
//! //#if subgroups
//! ... lines kept when the device has subgroup operations ...
//! //#else
//! ... lines kept otherwise (the f32, core-WebGPU path) ...
//! //#endif
//! ```
//!
//! Flags are `f16` and `subgroups`; `//#if !flag` negates. Blocks do not nest (none needs
//! to). Dropped lines become empty lines, so a compiler's line numbers still point into the
//! file. `tests/shaders.rs` validates every variant of every shader with naga; it includes
//! this file by path, which is why it uses nothing from the crate.

/// Which optional WGSL features a kernel's source may use: the device's enabled features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Variant {
    /// `enable f16;` and the `f16` type (wgpu's `SHADER_F16`, WebGPU's `shader-f16`).
    pub f16: bool,
    /// `subgroupAdd` and the other subgroup built-ins (wgpu's `SUBGROUP`).
    pub subgroups: bool,
}

impl Variant {
    /// Every combination, the plain f32 one first.
    pub const ALL: [Variant; 4] = [
        Variant {
            f16: false,
            subgroups: false,
        },
        Variant {
            f16: true,
            subgroups: false,
        },
        Variant {
            f16: false,
            subgroups: true,
        },
        Variant {
            f16: true,
            subgroups: true,
        },
    ];

    /// `f32`, `f16`, `subgroups` or `f16+subgroups`: what the benchmark and tests print.
    pub fn name(self) -> &'static str {
        match (self.f16, self.subgroups) {
            (false, false) => "f32",
            (true, false) => "f16",
            (false, true) => "subgroups",
            (true, true) => "f16+subgroups",
        }
    }

    fn flag(self, name: &str) -> Option<bool> {
        match name {
            "f16" => Some(self.f16),
            "subgroups" => Some(self.subgroups),
            _ => None,
        }
    }
}

/// `source` with only the lines `variant` keeps; an error names the first malformed
/// directive (an unknown flag, a nested `//#if`, an `//#else` or `//#endif` without one, or
/// an `//#if` left open).
pub fn specialize(source: &str, variant: Variant) -> Result<String, String> {
    let mut out = String::with_capacity(source.len());
    // Some(keep) inside an `//#if` block: whether its current branch's lines stay.
    let mut block: Option<bool> = None;
    let mut opened_at = 0;
    for (i, line) in source.lines().enumerate() {
        let number = i + 1;
        let directive = line.trim_start();
        if let Some(condition) = directive.strip_prefix("//#if ") {
            if block.is_some() {
                return Err(format!("line {number}: `//#if` inside another `//#if`"));
            }
            let condition = condition.trim();
            let (negated, name) = match condition.strip_prefix('!') {
                Some(name) => (true, name),
                None => (false, condition),
            };
            let value = variant
                .flag(name)
                .ok_or_else(|| format!("line {number}: unknown flag `{name}`"))?;
            block = Some(value != negated);
            opened_at = number;
            out.push('\n');
            continue;
        }
        if directive.trim_end() == "//#else" {
            let keep = block.ok_or_else(|| format!("line {number}: `//#else` without `//#if`"))?;
            block = Some(!keep);
            out.push('\n');
            continue;
        }
        if directive.trim_end() == "//#endif" {
            block
                .take()
                .ok_or_else(|| format!("line {number}: `//#endif` without `//#if`"))?;
            out.push('\n');
            continue;
        }
        if directive.starts_with("//#") {
            return Err(format!("line {number}: unknown directive `{directive}`"));
        }
        if block != Some(false) {
            out.push_str(line);
        }
        out.push('\n');
    }
    if block.is_some() {
        return Err(format!("line {opened_at}: `//#if` without `//#endif`"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "a\n//#if subgroups\nb\n//#else\nc\n//#endif\n//#if !f16\nd\n//#endif\n";

    #[test]
    fn each_variant_keeps_its_branch_and_the_line_numbers() {
        let plain = specialize(SOURCE, Variant::default()).unwrap();
        assert_eq!(plain, "a\n\n\n\nc\n\n\nd\n\n");
        let both = specialize(
            SOURCE,
            Variant {
                f16: true,
                subgroups: true,
            },
        )
        .unwrap();
        assert_eq!(both, "a\n\nb\n\n\n\n\n\n\n");
    }

    #[test]
    fn malformed_directives_are_errors() {
        let v = Variant::default();
        assert_eq!(
            specialize("//#if f64\n//#endif\n", v).unwrap_err(),
            "line 1: unknown flag `f64`"
        );
        assert_eq!(
            specialize("x\n//#if f16\n", v).unwrap_err(),
            "line 2: `//#if` without `//#endif`"
        );
        assert_eq!(
            specialize("//#endif\n", v).unwrap_err(),
            "line 1: `//#endif` without `//#if`"
        );
        assert_eq!(
            specialize("//#if f16\n//#if subgroups\n", v).unwrap_err(),
            "line 2: `//#if` inside another `//#if`"
        );
        assert_eq!(
            specialize("//#ifdef f16\n", v).unwrap_err(),
            "line 1: unknown directive `//#ifdef f16`"
        );
    }
}
