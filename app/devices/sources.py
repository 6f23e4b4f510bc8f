"""Where every number of the device table and the calibration comes from: one row per source.

A fact names its source by key; docs/devices.md prints this table, and a test holds every key a
fact or a calibration row uses to a row here. `where` is the public place a reader can check.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    key: str
    where: str  # repository and file, paper, issue or page
    says: str  # what the project reads from it


SOURCES: tuple[Source, ...] = (
    Source(
        "anemll-bench",
        "Anemll/anemll-bench Results.MD",
        "bandwidth the ANE streams at (llama_lm_head), per chip: M1 61, M1 Pro/Max 55, M2 60, "
        "M2 Pro/Max 62, M3 63, M3 Max 120, M4 64, M4 Pro 126, M4 Max 119, M5 70, M5 Max 148 "
        "GB/s",
    ),
    Source(
        "apple-rated",
        "en.wikipedia.org/wiki/Neural_Engine; apple.fandom.com/wiki/Neural_Engine "
        "(Apple's launch figures)",
        "rated Neural Engine TOPS: A15/M2 15.8, M1 11, A16 17, M3 18, A17 Pro/A18/A18 Pro 35, "
        "M4 38; from A17 Pro and M4 on the rating counts int8 operations, twice the fp16 rate "
        "(maderix: M4's 38 is 'about 2x the 19 TF fp16')",
    ),
    Source(
        "maderix-m4",
        "maderix.substack.com/p/inside-the-m4-apple-neural-engine-615; maderix/ANE README.md",
        "M4: ~0.095 ms of XPC + IOKit per evaluation (a 256x256 matmul takes 0.101 ms), "
        "~32 MB of on-chip SRAM (throughput drops ~30% beyond it), 18.6 TOPS fp16 over 128 "
        "chained convs",
    ),
    Source(
        "maderix-m5",
        "maderix/ANE training/m5result.md, README.md (M5 section)",
        "M5: ~0.07 ms per evaluation of a 256x256 conv",
    ),
    Source(
        "aneforge-paper",
        "arXiv:2606.17090 (ANEForge)",
        "~70 us per-program dispatch floor on the e5rt path",
    ),
    Source(
        "aneforge-cost",
        "sbryngelson/ANEForge docs/developer/optimizer-and-cost.md",
        "silicon-anchored cost model: M1 floor 0.22 ms, the floor scales with the operating "
        "clock; compute ramp eff_peak = peak * min(1, (flops / 1.8e10) ^ 0.38); bandwidth "
        "scales with core count, not clock",
    ),
    Source(
        "aneforge-llm",
        "sbryngelson/ANEForge docs/llm.md",
        "~2 GB of baked weights per program on a Mac (Qwen3-8B in 9 chunks)",
    ),
    Source(
        "aneforge-cross-chip",
        "sbryngelson/ANEForge docs/cross-chip.md, docs/capabilities.md, bench/results/ROOFLINES.md",
        "per-axis limit 16,384 on A13-A15-class chips and 65,536 from A16 on; palettized "
        "weights stream compressed from M1 on (2.37x on M1, 1.6-1.8x on M5); int8-affine "
        "streams from M2 on, not on M1",
    ),
    Source(
        "ane-guide",
        "ane-guide.readthedocs.io chapter 17",
        "M1 sweep: width and height <= 16,384, channels <= 65,536",
    ),
    Source(
        "coreml-llm",
        "john-rocky/CoreML-LLM release v1.1.0",
        "iPhone 17 Pro (A19 Pro): a 2-chunk split of ~2 GB fp16 each was rejected and fell "
        "back to the GPU; chunks <= 1 GB of int8 stay on the ANE",
    ),
    Source(
        "anemll-convert",
        "Anemll/Anemll docs/convert.md",
        "weight files up to ~2 GB on macOS, 1 GB on iOS",
    ),
    Source(
        "apple-specs",
        "support.apple.com/specs (Apple's technical specifications)",
        "the smallest memory each chip shipped with: M1 8 GB, M1 Pro 16, M1 Max 32, M2 8, "
        "M2 Pro 16, M2 Max 32, M3 8, M3 Pro 18, M3 Max 36, M4 8 (iPad Pro), M4 Pro 24, "
        "M4 Max 36, M5 12 (iPad Pro); A15 4 (iPhone 13), A16 6, A17 Pro 8, A18 8, A18 Pro 8, "
        "A19 Pro 12",
    ),
    Source(
        "apple-products",
        "en.wikipedia.org/wiki/Apple_A15, Apple_A16, Apple_A17, Apple_A18, Apple_A19, Apple_M1 "
        "... Apple_M5 (each chip's devices); hothardware.com/news/apple-unveils-macbook-pro-m5-"
        "pro-m5-max",
        "which product holds which chip: A15 iPhone 13 (mini, Pro, Pro Max), SE (3rd "
        "generation), 14, 14 Plus, iPad mini (6th generation); A16 iPhone 14 Pro (Max), 15, 15 "
        "Plus; A17 Pro iPhone 15 Pro (Max), iPad mini (A17 Pro); A18 iPhone 16, 16 Plus, 16e; "
        "A18 Pro iPhone 16 Pro (Max); A19 Pro iPhone 17 Pro (Max), iPhone Air; the M chips of "
        "each MacBook Air, MacBook Pro, Mac mini, iMac, Mac Studio, iPad Air and iPad Pro (M5 "
        "Pro and Max: the MacBook Pro of March 2026)",
    ),
    Source(
        "exo-1672",
        "exo-explore/exo pull request #1672",
        "Metal's recommended working set on a 16 GB M4 Mac mini: 10.67 GB (two thirds)",
    ),
    Source(
        "sglang-29949",
        "sgl-project/sglang pull request #29949",
        "recommendedMaxWorkingSetSize is roughly 65-75% of RAM (17.76 GiB on a 24 GB Mac)",
    ),
    Source(
        "iphone-app-share",
        "this project's assumption (developer.apple.com/forums/thread/"
        "777370 shows the increased-memory-limit entitlement lifting it on an iPad)",
        "no public per-app memory limit for iPhones: half the RAM is assumed for an app "
        "without the increased-memory-limit entitlement",
    ),
    Source(
        "chip-families",
        "maderix/ANE README.md (M5 notes); sbryngelson/ANEForge docs/cross-chip.md",
        "ANE generations: A14 ~ M1, A15 ~ M2, A16 ~ M3, A17 Pro ~ M4 ~ M5",
    ),
    # -- calibration measurements ---------------------------------------------------------------
    Source(
        "maderix-chaining",
        "maderix/ANE docs/BENCHMARK_RESULTS.md",
        "M4 Max, chained 1x1 conv 512 channels, spatial 64: 32 convs 2.63 TF/s, 64 convs "
        "8.80, 128 convs 11.14",
    ),
    Source(
        "maderix-community",
        "maderix/ANE benchmarks/community_results.json",
        "M3 Pro: 16.77 TF/s peak, 15.04 sustained over 128 convs of 512 channels, spatial "
        "2048; M4 Pro / M4 Max in-memory peak 12.57 / 10.93; M5 12.2-12.4",
    ),
    Source(
        "coremltools-quant-perf",
        "apple/coremltools docs-guides/source/opt-quantization-perf.md",
        "ResNet50 fp16 1.52 ms on A16 (iPhone 14 Pro), 1.38 ms on A17 Pro (iPhone 15 Pro); "
        "W8A8 0.94 / 0.77 ms",
    ),
    Source(
        "ane-transformers",
        "machinelearning.apple.com/research/neural-engine-transformers",
        "distilbert, sequence 128, 3.47 ms on the iPhone 13 (A15) Neural Engine",
    ),
    Source(
        "mobius-77",
        "FluidInference/mobius pull request #77",
        "Qwen3-0.6B prefill of 128 tokens in 12.5 ms on the M5 Pro ANE (Core ML)",
    ),
    Source(
        "dictus-371",
        "getdictus/dictus-ios pull request #371",
        "Qwen3-1.7B ANEMLL LUT6, iPhone 15 Pro (A17 Pro), backgrounded: ~17 tok/s decode "
        "(162 tokens in ~9.4 s), prefill 1,680 tokens in ~4.5 s",
    ),
    Source(
        "coreml-llm-decode",
        "john-rocky/CoreML-LLM release v1.1.0",
        "Qwen3.5-2B INT8 in 4 chunks, iPhone 17 Pro (A19 Pro): ~17 tok/s decode",
    ),
    Source(
        "ane-lm",
        "skyfallsin/ANE-LM README.md",
        "Qwen3.5-4B int8 on the M3 Max ANE: 11.66 tok/s decode, 30 tok/s prompt",
    ),
    Source(
        "orion",
        "mechramc/Orion README.md",
        "GPT-2 124M on the M4 Max ANE: 170+ tok/s (5.8 ms per token)",
    ),
    Source(
        "more-ane-transformers",
        "smpanaro/more-ane-transformers evals/SPEED.md",
        "time per generated token with a 512-token input, Core ML on the ANE: gpt2-xl 138 ms "
        "on M1, 95 ms on M2 (a pipeline of pieces); pythia-1B 304 ms on M1, pythia-2.8B "
        "1,050 ms on M2 (without the optimized coremltools the gpt2 rows used)",
    ),
    Source(
        "aneforge-qwen",
        "sbryngelson/ANEForge docs/llm.md",
        "Qwen3-0.6B ~75 tok/s decode and ~8,600 prompt tok/s, Qwen3-8B 7.5 tok/s fp16 and "
        "7.9 int8, on the maintainer's Mac (chip not named)",
    ),
    Source(
        "coreai-qwen",
        "huggingface.co/flyingfishinwater/coreai_models",
        "Qwen3-0.6B on the iPhone 16 Pro Max (A18 Pro) ANE through Core AI: 76.5 tok/s "
        "foreground, 60.3 backgrounded",
    ),
    Source(
        "anemll-33",
        "Anemll/Anemll issue #33",
        "Qwen3-4B ANEMLL at context 1024 on M1: up to 11 tok/s",
    ),
    Source(
        "device-check",
        "app/devices/measured_rows.json (this repository)",
        "decode tok/s of a kit measured by the service's device-check job: Core ML "
        "(CPU_AND_NE) on the named device, each row naming its kit.json digest",
    ),
    Source(
        "apple-llama",
        "machinelearning.apple.com/research/core-ml-on-device-llama",
        "Llama-3.1-8B int4 stateful on the M1 Max GPU: ~33 tok/s",
    ),
)

SOURCES_BY_KEY: dict[str, Source] = {s.key: s for s in SOURCES}
