"""Shared Triton building blocks of the op families, and their host-side dtype helpers.

Each family (``tritred_ops.families.*``) holds its own kernels; what they have in common lives here, so that
each combine rule, tile layout and statistics step is written once:

- :mod:`.dtypes`: Triton dtypes, accumulator dtypes, identities, float64 scalars as two float32 parts (host side);
- :mod:`.combine`: combine functions of sum, product, max and min, with and without indices;
- :mod:`.rows`: row and column tiles, shifted (16-byte aligned) tiles, L2 hints, dependent launches, barriers;
- :mod:`.welford`: Welford lanes, Chan's merge and the corrected two-pass statistics of a tile.
"""
