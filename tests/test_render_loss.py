"""The mapper's render loss kernels (rasterizer.render_l1_loss, CPU and, with a GPU, CUDA) against
the PyTorch oracle: the loss, the pixel errors and the gradients of colour and depth, at sizes of
one pixel to several CUDA blocks, with empty masks, exact ties and a graph replay."""
from __future__ import annotations

import pytest
import torch

import rasterizer
from rasterizer.loss import reference

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _images(h: int, w: int, device: str, seed: int = 0, valid_share: float = 0.8, ties: bool = True):
    """A render and an observation of (h, w): colours in [0, 1], depths 0.5-4 m, masks at random
    (depth_ok within valid); with ``ties`` a tenth of the pixels equal in both (|x| at 0)."""
    g = torch.Generator().manual_seed(seed)
    color, obs_color = torch.rand(h, w, 3, generator=g), torch.rand(h, w, 3, generator=g)
    depth, obs_depth = 0.5 + 3.5 * torch.rand(h, w, generator=g), 0.5 + 3.5 * torch.rand(h, w, generator=g)
    if ties:
        same = torch.rand(h, w, generator=g) < 0.1
        obs_color[same] = color[same]
        obs_depth[same] = depth[same]
    valid = torch.rand(h, w, generator=g) < valid_share
    depth_ok = valid & (torch.rand(h, w, generator=g) < 0.8)
    return [t.to(device) for t in (color, depth, obs_color, obs_depth, valid, depth_ok)]


def _loss_and_grads(images, weight, backend):
    color, depth, *rest = images
    color, depth = color.clone().requires_grad_(True), depth.clone().requires_grad_(True)
    out = rasterizer.render_l1_loss(color, depth, *rest, weight, backend=backend)
    g_color, g_depth = torch.autograd.grad(out.loss, [color, depth])
    return out, g_color, g_depth


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(240, 320), (37, 53), (1, 1), (3, 700)])
@pytest.mark.parametrize("weight", [1.0, 8.0])
def test_matches_the_oracle(device, shape, weight):
    images = _images(*shape, device, seed=shape[0] * 1000 + shape[1])
    got, gc, gd = _loss_and_grads(images, weight, "auto")
    want, wc, wd = _loss_and_grads([t.cpu().double() if t.is_floating_point() else t.cpu() for t in images],
                                   weight, "reference")
    assert got.loss.dtype == torch.float32 and got.loss.shape == ()
    assert got.loss.item() == pytest.approx(want.loss.item(), rel=1e-6)
    torch.testing.assert_close(got.pixel_error.cpu(), want.pixel_error.float(), rtol=1e-6, atol=1e-7)
    # the gradient is sign x mask x one scale: equal to float32 rounding of the scale
    torch.testing.assert_close(gc.cpu(), wc.float(), rtol=1e-6, atol=0)
    torch.testing.assert_close(gd.cpu(), wd.float(), rtol=1e-6, atol=0)
    assert not got.pixel_error.requires_grad


@pytest.mark.parametrize("device", DEVICES)
def test_empty_masks_give_zero_loss_and_gradient(device):
    images = _images(16, 24, device, valid_share=0.0)
    assert not images[4].any() and not images[5].any()
    got, gc, gd = _loss_and_grads(images, 8.0, "auto")
    assert got.loss.item() == 0.0
    assert not gc.any() and not gd.any() and not got.pixel_error.any()


@pytest.mark.parametrize("device", DEVICES)
def test_the_loss_repeats_to_the_bit(device):
    images = _images(240, 320, device, seed=3)
    a = rasterizer.render_l1_loss(*images, 8.0).loss
    b = rasterizer.render_l1_loss(*images, 8.0).loss
    assert torch.equal(a, b)


def test_the_gradient_follows_the_loss_gradient():
    """The backward scales by the incoming gradient (here 2.5 x the loss, and a second term)."""
    images = _images(20, 30, "cpu", seed=5)
    color = images[0].clone().requires_grad_(True)
    out = rasterizer.render_l1_loss(color, *images[1:], 4.0)
    (g,) = torch.autograd.grad(2.5 * out.loss + color.sum(), [color])
    ref = reference(color, *images[1:], 4.0)
    (want,) = torch.autograd.grad(2.5 * ref.loss + color.sum(), [color])
    torch.testing.assert_close(g, want, rtol=1e-6, atol=1e-7)


def test_bad_input_names_the_problem():
    color, depth, obs_color, obs_depth, valid, depth_ok = _images(8, 8, "cpu")
    with pytest.raises(ValueError, match="obs_depth"):
        rasterizer.render_l1_loss(color, depth, obs_color, obs_depth[:4], valid, depth_ok, 1.0)
    with pytest.raises(ValueError, match="bool"):
        rasterizer.render_l1_loss(color, depth, obs_color, obs_depth, valid.float(), depth_ok, 1.0)
    with pytest.raises(ValueError, match="obs_color must be floating point"):
        rasterizer.render_l1_loss(color, depth, (obs_color * 255).to(torch.uint8), obs_depth, valid, depth_ok, 1.0)
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        rasterizer.render_l1_loss(color[..., :2], depth, obs_color, obs_depth, valid, depth_ok, 1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_graph_replays_the_loss_and_its_gradient():
    images = _images(240, 320, "cuda", seed=7)
    color = images[0].clone().requires_grad_(True)
    static = [color, *images[1:]]

    def step():
        out = rasterizer.render_l1_loss(*static, 8.0)
        return out.loss.detach(), torch.autograd.grad(out.loss, [color])[0]

    want_loss, want_grad = step()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()                                    # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss, grad = step()
    with torch.no_grad():
        color.copy_(images[2])                    # the render equals the observation: loss 0, no gradient
    graph.replay()
    torch.cuda.synchronize()
    assert loss.item() == pytest.approx(reference(*static, 8.0).loss.item(), rel=1e-6)   # the depth term alone
    with torch.no_grad():
        color.copy_(images[0])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(loss, want_loss) and torch.equal(grad, want_grad)
