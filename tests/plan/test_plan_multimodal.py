"""A multimodal checkpoint's vision tower is priced as vLLM loads it, and left out when serving text only; the
more-gpus lever stays within one 8-GPU node.

Gemma 3 27B's SigLIP tower (27 layers of 1152, MLP 4304, 896-pixel images in 14-pixel patches, transformers'
SiglipVisionModel): per layer 4 x (1152^2 + 1152) + (1152 x 4304 + 4304) + (4304 x 1152 + 1152) + 4 x 1152 =
15,239,504; x 27 = 411,466,608; patch embedding 3 x 14 x 14 x 1152 + 1152 = 678,528; 64^2 positions x 1152 =
4,718,592; final LayerNorm 2,304; Gemma 3's projector 1152 x 5376 + 1152 = 6,194,304: 423,060,336 parameters,
846,120,672 B at bf16 (27.01e9 + 0.42e9 = 27.43e9, the "27B" of the model's name with its vision tower).
"""

from __future__ import annotations

import json

ENCODER = 423_060_336


def test_the_vision_tower_is_loaded_unless_serving_text_only(cli):
    def doc(*extra):
        r = cli("plan", "--model", "gemma-3-27b", "--gpu", "h100", "--json", *extra)
        assert r.code == 0, r.stderr
        return json.loads(r.stdout)

    full, text = doc(), doc("--language-only")
    assert full["weights_total_bytes"] - text["weights_total_bytes"] == 2 * ENCODER
    assert full["ledger"]["kv_pool_bytes"] < text["ledger"]["kv_pool_bytes"]

    def words(*extra):  # the table may wrap a cell: compare the words
        return " ".join(cli("plan", "--model", "gemma-3-27b", "--gpu", "h100", *extra).stdout.replace("│", " ").split())

    assert "+ 0.423e9 vision tower at" in words()
    assert "vision tower: not loaded" in words("--language-only")


def test_more_gpus_is_the_next_tp_within_one_node(cli):
    def levers(tp):
        r = cli("plan", "--model", "gemma-3-27b", "--gpu", "h100", "--tp", str(tp), "--json")
        assert r.code == 0, r.stderr
        return {lv["name"]: lv for lv in json.loads(r.stdout)["levers"]}

    # 16 KV heads: up to one head per rank would be TP 16, two nodes; the lever stops at the node's 8 GPUs
    assert levers(1)["more-gpus"]["change"] == "--tp 8"
    assert "binds" in levers(1)["more-gpus"]["note"]
    assert "more-gpus" not in levers(8)


# vLLM's start-up profile of that tower (gpu_model_runner.profile_run, multimodal/encoder_budget.py at 0.32): one
# batch of max_num_batched_tokens // 256 images (Gemma 3 pools an image to mm_tokens_per_image = 256 tokens), each
# 64^2 = 4,096 patches holding 2 x (2 x 1152 + 2 x 4304) bytes at the MLP, plus 3 x 896^2 16-bit pixels; its
# outputs (256 x 5376 16-bit values an image) stay cached while the language model's dummy pass runs.
PER_IMAGE_PEAK = 4096 * 2 * (2 * 1152 + 2 * 4304) + 2 * 3 * 896**2
PER_IMAGE_KEPT = 256 * 5376 * 2


def test_the_start_up_profile_of_the_vision_tower_is_priced_with_vllms_image_count(cli):
    def ledger(*extra):
        r = cli("plan", "--model", "gemma-3-27b", "--gpu", "h100", "--engine", "vllm", "--json", *extra)
        assert r.code == 0, r.stderr
        return json.loads(r.stdout)

    gib = 1 << 30
    for tokens, images in ((8192, 32), (32768, 128)):
        doc = ledger("--max-num-batched-tokens", str(tokens))
        profile = doc["vision_profile"]
        assert profile == {
            "images": images,
            "peak_bytes": images * PER_IMAGE_PEAK,
            "kept_bytes": images * PER_IMAGE_KEPT,
        }
        # engine mode (vLLM 0.32 by default, Model Runner V2) predicts the profile run: the encoder's phase, and the
        # outputs held through the language model's pass and the greedy sampler (the pixels go with the encoder
        # call's locals; kneecap.plan.profile_peak v2_encoder_profile), the encoder's phase the peak at both batches
        act = doc["engine"]["activation_profile"]
        assert (act["images"], act["encoder_bytes"]) == (images, images * PER_IMAGE_PEAK)
        assert act["encoder_held_bytes"] == images * PER_IMAGE_KEPT
        assert (act["runner"], act["phase"]) == ("v2", "encoder")
        assert doc["engine"]["activation_bytes"] == act["workspace_bytes"] + act["runner_buffer_bytes"] + max(
            act["encoder_bytes"], act["forward_bytes"], act["sampler_bytes"]
        )
    # 128 images' peak (11.2 GiB) sets the run's peak, and the pool shrinks by what it takes
    small, large = ledger("--max-num-batched-tokens", "8192"), ledger("--max-num-batched-tokens", "32768")
    assert small["ledger"]["kv_pool_bytes"] - large["ledger"]["kv_pool_bytes"] > 7 * gib
    text = ledger("--language-only")
    assert text["vision_profile"] is None and text["engine"]["activation_profile"]["images"] == 0
    assert text["engine"]["activation_bytes"] < small["engine"]["activation_bytes"]
