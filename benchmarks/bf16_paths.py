"""How far the served bf16 path is from its ceiling, and whether its answers depend on the batch.

On one real photograph (IDRiD_01 through the artifact's preprocessing), 1 thread, round-robin in one process:

* ``fp32`` — the drawn network as served in fp32 by torch (per-draw loop);
* ``autocast`` — the served bf16 path (torch autocast casts each convolution's weights on every call);
* ``precast`` — the drawn convolution weights cast to bf16 once, the head kept in fp32;
* ``frozen`` — ``precast`` traced and frozen by TorchScript (oneDNN weight prepacking, conv + activation
  fusion).

Then the scorer ``RADSCREEN_PRECISION=auto`` builds on this machine scores ``--images`` IDRiD photographs as one
batch and one by one, and prints the largest difference in p̄ and MI and whether any outcome differs.
Needs a CPU with native bf16 (emulated bf16 is ~70x slower; the script refuses).

    .venv/bin/python benchmarks/bf16_paths.py --repeats 5 --images 6
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.artifact import load_artifact
from models.nn.draws import DrawnNetwork
from models.platform.cpu import detect_cpu
from service.inference.imaging import ImagePipeline
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.spec import ScorerSpec
from support.shared_data import IDRID, missing_reason


def precast(net: DrawnNetwork) -> Callable[[torch.Tensor], torch.Tensor]:
    """The per-draw loop with bf16 convolution weights cast once; pooled features and the head in fp32."""
    k = net.mc_samples
    weights = []
    for i in range(net.n_convs):
        w, b = getattr(net, f"conv{i}_weight"), getattr(net, f"conv{i}_bias")
        out = w.shape[0] // k
        weights.append([(w[d * out:(d + 1) * out].to(torch.bfloat16).contiguous(memory_format=torch.channels_last),
                         b[d * out:(d + 1) * out].to(torch.bfloat16)) for d in range(k)])

    def run(x: torch.Tensor) -> torch.Tensor:
        outs = []
        for d in range(k):
            h = x.to(torch.bfloat16)
            for op in net.plan:
                if op[0] == "conv":
                    i = op[1]  # type: ignore[misc]
                    stride, padding = net.conv_meta[i]
                    h = F.conv2d(h, *weights[i][d], stride, padding)
                elif op[0] == "act":
                    h = net._act(h)
                elif op[0] == "pool":
                    h = F.max_pool2d(h, 2)
                elif op[0] == "gpool":
                    h = h.float()
                    h = torch.cat([h.mean(dim=(-2, -1)), h.amax(dim=(-2, -1))], dim=-1)  # [B, 2C]
                elif op[0] == "linear":
                    i = op[1]  # type: ignore[misc]
                    h = F.linear(h, getattr(net, f"linear{i}_weight")[d], getattr(net, f"linear{i}_bias")[d])
            outs.append(h)
        return net.split_head_draws(torch.stack(outs))

    return run


class _Module(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=None)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--images", type=int, default=6, help="IDRiD photographs for the batch-invariance check")
    args = p.parse_args()
    cpu = detect_cpu()
    if not cpu.native_bf16:
        raise SystemExit(f"bf16_paths needs a CPU with native bf16; this one: {cpu.summary()}")
    if not IDRID.is_dir():
        raise SystemExit(missing_reason(IDRID))
    torch.set_num_threads(1)
    art = load_artifact(args.model_dir)
    pipe = ImagePipeline.of(art.image_transform())
    x = torch.from_numpy(prepare_image((IDRID / "IDRiD_01.jpg").read_bytes(), pipe).pixels[None])
    x = x.contiguous(memory_format=torch.channels_last)  # [1, 3, S, S]
    net = art.serving_network()
    net.strategy = "loop"
    net = net.to(memory_format=torch.channels_last).eval()  # type: ignore[call-overload]

    def autocast(t: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return net(t)

    with torch.no_grad():
        cast = precast(net)
        frozen = torch.jit.freeze(torch.jit.trace(_Module(cast).eval(), x))
        paths: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
            "fp32": net, "autocast": autocast, "precast": cast, "frozen": frozen}
        ref = net(x).float()
        for fn in paths.values():  # warm-up (oneDNN picks kernels, TorchScript optimises on its first calls)
            fn(x), fn(x)
        times: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.repeats):
            for name, fn in paths.items():
                start = time.perf_counter()
                fn(x)
                times[name].append(time.perf_counter() - start)
        print(f"{cpu.summary()}, 1 thread, {args.repeats} round-robin rounds")
        for name, fn in paths.items():
            print(f"{name:<9} p50 {statistics.median(times[name]):.3f} s/img, "
                  f"max |Δ logit| vs fp32 {float((fn(x).float() - ref).abs().max()):.2e}")

    scorer = load_scorer(ScorerSpec(model_dir=args.model_dir, device="cpu", threads=1), cpu=cpu)
    images = [prepare_image(f.read_bytes(), scorer.pipeline) for f in sorted(IDRID.glob("*.jpg"))[: args.images]]
    together = scorer.score_batch(images)
    alone = [scorer.score_batch([im])[0] for im in images]
    dp = max(abs(a.probability - b.probability) for a, b in zip(together, alone, strict=True))
    dmi = max(abs(a.mutual_information - b.mutual_information) for a, b in zip(together, alone, strict=True))
    same = all(a.outcome == b.outcome for a, b in zip(together, alone, strict=True))
    print(f"auto = {scorer.backend.name} {scorer.precision}: {len(images)} photographs as one batch vs one by one: "
          f"max |Δp̄| {dp:.1e}, max |ΔMI| {dmi:.1e} nat, outcomes {'identical' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
