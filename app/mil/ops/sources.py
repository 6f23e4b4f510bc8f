"""Where the records' facts come from: research notes (/work/shared/research), other projects,
and the Apple-compiled bundles an op name was seen in."""

# -- ANE reports ----------------------------------------------------------------------------------
MIL_E = "mil-text-and-blob.md §(e)"
FUSED_24 = "fused-quantized-mlmodelc.md §2.4"
ANEFORGE_CAPABILITIES = "sbryngelson/ANEForge aneforge/_capabilities.py"
# ANEForge's sweep of the MIL vocabulary: each op alone in a program, compiled for the ANE only
# (e5rt, device mask 0x4) on one M5, run, and compared with NumPy. Its classes: reachable+correct
# (the relative error is given), reachable (ran; not compared), not-implemented-on-ANE and
# compile-walled (the compile failed).
ANEFORGE_SWEEP = "sbryngelson/ANEForge aneforge/full_mil_vocabulary_sweep.json@067717ab"
# ane-guide ch. 17 via ane-anchors-2026-11.md §2e: limits of ops Core ML runs on the ANE
ANE_GUIDE = "ane-anchors-2026-11.md §2e (ane-guide.readthedocs.io ch. 17)"
# Core ML placement in exported detection models (RF-DETR, Depth Anything, ANEForge's ONNX)
DETECTION = "ane-anchors-2026-11-27.md §4 (detection / segmentation / depth)"

# -- Apple's histogram names (metadata.json `mlProgramOperationTypeHistogram`) --------------------
# The goldens are ../shared/goldens (tests/fixtures/goldens holds the same silero-vad, add_model
# and apple-mil-text bundles); the rest were read off published bundles.
SILERO_INT8 = "goldens silero-vad/unified_int8 (coremlc 3500.32.1)"
SILERO_PALETTE = "goldens silero-vad/unified_palette_4bit (coremlc 3500.32.1)"
SILERO_PRUNED = "goldens silero-vad/unified_pruned_int8 (coremlc 3500.32.1)"
ADD_MODEL = "goldens coremltools-add_model (coremlc 3402.4.1)"
PARAKEET_ENCODER = "goldens ios17-text/ParakeetEOU-160ms-streaming_encoder (coremlc 3500.32.1)"
PARAKEET_PREPROCESSOR = "goldens ios17-text/ParakeetEOU-parakeet_eou_preprocessor"
PARAKEET_DECODER = "goldens ios17-text/ParakeetEOU-decoder"
PARAKEET_JOINT = "goldens ios17-text/ParakeetEOU-joint_decision"
GATHER_3520 = "goldens apple-mil-text/coremlc-3520.5.1-flexible-gather (its metadata.json)"
MULTIFUNCTION_3600 = "goldens apple-mil-text/coremlc-3600.25.1-flexible-multifunction"
QUANTIZED_3600 = "goldens apple-mil-text/coremlc-3600.25.1-quantized-constexpr"
# Bundles read when the table was first written and not kept: FluidInference/FluidAudio
# (Parakeet, Argmax, TokenDurationPrediction, TransposeEncoder) and FluidInference/mobius
# (KokoroNoise) metadata.json files, and the `Ios16.einsum` key Stable Diffusion apps read.
PUBLISHED = "published FluidAudio/mobius bundles (not in the goldens)"
# Issue 25: an Apple-compiled iOS16 bundle's histogram held `Ios16.sub` where the rule said `Sub`.
ISSUE_25 = "issue 25: an Apple-compiled iOS16 bundle (Ios16.sub; Ios16.softmax likewise)"

# iOS versions of program opsets and op versions, as the histogram entries use them
BASE, IOS16, IOS17, IOS18 = 15, 16, 17, 18
