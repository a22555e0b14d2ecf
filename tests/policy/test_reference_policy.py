"""The VLA-sized reference policy (evalwf.policy.reference): its tiny CPU build through the same code as the pi0-sized
one, and the pi0 size's parameter counts (on torch's meta device: no memory, no GPU). torch is an optional extra
(`pip install .[reference]`), not in the test environment `make test` builds: there these tests skip."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed: it is the optional extra [reference], which make test does not install"
)

from evalwf.policy.reference import SIZES, build_model, tiny  # noqa: E402
from evalwf.policy.template import PredictAdapter  # noqa: E402


@pytest.fixture(scope="module")
def policy():
    return tiny()


def rngs(*seeds: int) -> list[np.random.Generator]:
    return [np.random.default_rng(seed) for seed in seeds]


def test_one_chunk_per_request_whose_noise_is_its_own(policy):
    images = [np.full((224, 224, 3), value, np.uint8) for value in (0, 80, 160)]
    prompts = ["put the bowl on the plate", "open the drawer", ""]
    batched = policy.predict_batch(images, prompts, rngs(1, 2, 3))
    assert [chunk.shape for chunk in batched] == [(50, 7)] * 3 and batched[0].dtype == np.float32
    assert all(np.isfinite(chunk).all() for chunk in batched)
    alone = [
        policy.predict_batch([image], [prompt], rngs(seed))[0]
        for image, prompt, seed in zip(images, prompts, (1, 2, 3), strict=True)
    ]
    for one, many in zip(alone, batched, strict=True):
        np.testing.assert_allclose(one, many, rtol=1e-4, atol=1e-5)  # float32 batched matmuls: rounding at most
    again = policy.predict_batch(images[:1], prompts[:1], rngs(1))[0]
    assert np.array_equal(again, alone[0])  # the same request, the same answer
    other = policy.predict_batch(images[:1], prompts[:1], rngs(9))[0]
    assert not np.allclose(other, alone[0])  # the noise comes from the request's generator


def test_served_as_evalwf_serve_serves_it(policy):
    """What `evalwf serve --policy evalwf.policy.reference:tiny --repeat 1` calls: LIBERO's HWC and RoboTwin's CHW
    images (another size: resized to 224) through PredictAdapter's batch path, with the requests' generators."""
    adapter = PredictAdapter(policy, "observation/image", "prompt", repeat=1)
    requests = [
        {"observation/image": np.zeros((224, 224, 3), np.uint8), "prompt": "a"},
        {"observation/image": np.zeros((3, 240, 320), np.uint8), "prompt": "b"},
    ]
    replies = adapter.infer_batch(requests)
    assert [reply["actions"].shape for reply in replies] == [(50, 7), (50, 7)]


def test_the_pi0_size_is_pi0s():
    with torch.device("meta"):
        model = build_model(SIZES["pi0"])
    millions = {part: sum(p.numel() for p in getattr(model, part).parameters()) / 1e6 for part in ("vision", "decoder")}
    assert 380 < millions["vision"] < 440  # SigLIP So400m
    assert 1900 < millions["decoder"] < 2300  # Gemma 2B without its 256k-token embedding
    size = SIZES["pi0"]
    assert (size.image_size // size.patch) ** 2 == 256 and (size.horizon, size.action_dim) == (50, 7)
    assert size.denoising_steps == 10
