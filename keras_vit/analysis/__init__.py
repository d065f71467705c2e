"""Look inside a Vision Transformer: the paper's analysis (Section 4.5).

- `attention_rollout` / `rollout_patch_maps`: what the output token attends
  to in the input, across all layers (Fig. 6 / 14).
- `mean_attention_distance`: how far each head looks, per layer (Fig. 7
  right / 11).
- `position_embedding_similarity`: the 2D structure learned by the 1D
  position embeddings (Fig. 7 centre).
- `patch_embedding_pca`: principal components of the patch filters (Fig. 7
  left).

The numerics (`keras_vit.analysis.core`) are NumPy only; `extract` reads a
model; `plots` draws the figures; `report.run_analysis` does it all
(`keras-vit-analysis` on the command line). `curves.draw_curves` draws a
training run's loss, accuracy and learning rate from its history.
"""

from keras_vit.analysis.core import (
    TokenLayout,
    attention_rollout,
    layer_attention_distance,
    mean_attention_distance,
    patch_centres,
    patch_distances,
    patch_embedding_pca,
    position_embedding_similarity,
    rollout_patch_maps,
    rollout_step,
    similarity_mosaic,
    uniform_attention_distance,
    upsample_bilinear,
)
from keras_vit.analysis.curves import draw_curves
from keras_vit.analysis.extract import (
    AttentionStats,
    attention_stats,
    patch_kernel,
    position_embeddings,
    token_layout,
)
from keras_vit.analysis.plots import (
    plot_attention_rollout,
    plot_mean_attention_distance,
    plot_patch_embedding_pca,
    plot_position_similarity,
)
from keras_vit.analysis.report import run_analysis

__all__ = [
    "AttentionStats",
    "TokenLayout",
    "attention_rollout",
    "attention_stats",
    "draw_curves",
    "layer_attention_distance",
    "mean_attention_distance",
    "patch_centres",
    "patch_distances",
    "patch_embedding_pca",
    "patch_kernel",
    "plot_attention_rollout",
    "plot_mean_attention_distance",
    "plot_patch_embedding_pca",
    "plot_position_similarity",
    "position_embedding_similarity",
    "position_embeddings",
    "rollout_patch_maps",
    "rollout_step",
    "run_analysis",
    "similarity_mosaic",
    "token_layout",
    "uniform_attention_distance",
    "upsample_bilinear",
]
