"""What SAE training shares across models: dead latents re-initialized between training rounds
(the resampling of Bricken et al., 2023)."""

from __future__ import annotations

import torch
from sae_lens.saes.sae import TrainingSAE


@torch.no_grad()
def reinitialize_dead_latents(
    sae: TrainingSAE, sample: torch.Tensor, generator: torch.Generator
) -> int:
    """Re-initialize the latents of ``sae`` that never fire on ``sample: (n, d_in)``.

    Each dead latent gets the direction of a sample activation (relative to ``b_dec``) drawn
    with probability proportional to its squared reconstruction error, as decoder row and
    encoder column, scaled to the mean norms of the live latents; its encoder bias becomes the
    live latents' mean. Returns the number of latents re-initialized.
    """
    fired = torch.zeros(sae.cfg.d_sae, dtype=torch.bool)
    errors = []
    for start in range(0, len(sample), 4096):
        batch = sample[start : start + 4096]
        features = sae.encode(batch)
        fired |= (features > 0).any(0)
        errors.append(((sae.decode(features) - batch) ** 2).sum(-1))
    dead = (~fired).nonzero()[:, 0]
    if len(dead) == 0 or not fired.any():
        return 0
    picked = torch.multinomial(torch.cat(errors), len(dead), replacement=False, generator=generator)
    directions = sample[picked] - sae.b_dec
    directions /= directions.norm(dim=-1, keepdim=True).clamp(min=1e-8)
    sae.W_dec[dead] = directions * sae.W_dec[fired].norm(dim=-1).mean()
    sae.W_enc[:, dead] = directions.T * sae.W_enc[:, fired].norm(dim=0).mean()
    sae.b_enc[dead] = sae.b_enc[fired].mean()
    return len(dead)
