"""TensorRT optimization profiles for any graph's inputs (pure functions; no GPU needed)."""

from pathlib import Path

from floodway.build import trt


def test_text_inputs_keep_their_profile_and_folder_name():
    shapes = trt.profile_shapes(["input_ids", "attention_mask"], 64, 256, 32)
    assert shapes == {n: [1, 1, 32, 128, 64, 256] for n in ("input_ids", "attention_mask")}
    assert trt.profile_id(shapes) == "b64-s256-o32x128"


def test_images_and_modules_get_fixed_axes_fixed_and_dynamic_ones_bounded():
    shapes = trt.profile_shapes([("pixel_values", ["batch", 3, 224, 224]),
                                 ("mask", ["batch", "mask_1"])], 16, 100, 8)
    assert trt.split_profile(shapes["pixel_values"]) == (
        (1, 3, 224, 224), (8, 3, 224, 224), (16, 3, 224, 224))
    assert trt.split_profile(shapes["mask"]) == ((1, 1), (8, 50), (16, 100))
    assert trt.profile_id({"pixel_values": shapes["pixel_values"]}) == "b16-3x224x224-o8x3x224x224"


def test_onnx_runtime_tensorrt_provider_shapes(tmp_path: Path):
    shapes = trt.profile_shapes([("pixel_values", ["batch", 3, 32, 32])], 16, 100, 8)
    _, opts = trt.ort_trt_provider(tmp_path, "a" * 64, shapes)
    assert opts["trt_profile_min_shapes"] == "pixel_values:1x3x32x32"
    assert opts["trt_profile_opt_shapes"] == "pixel_values:8x3x32x32"
    assert opts["trt_profile_max_shapes"] == "pixel_values:16x3x32x32"
