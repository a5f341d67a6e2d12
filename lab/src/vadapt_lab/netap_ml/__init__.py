"""NetAP-ML (Park et al., Sensors 2023): training data, model comparison and export.

- ``grid``: runs the paper's training grid (VMs x threads x message size x
  polling interval) in the simulator through ``vadapt sim sweep`` and writes one
  CSV row per point with its provenance.
- ``train``: compares the paper's four regressors (LR, ABR, KRR, RFR) with
  randomized search and 5-fold cross-validation, then fits the random forest
  that is shipped.
- ``export``: writes a fitted forest as plain JSON with every float kept
  exact (IEEE-754 bits in hex), and the golden file the Rust evaluator is
  tested against; reads it back and predicts as the Rust evaluator does.
- ``evaluate``: the paper's Table 1 / Figure 4 in the simulator.
- ``daemon``: a real ``vadapt serve`` with synthetic guests, driven from here.
- ``grid_real``: a smaller training grid measured on the real daemon.
- ``compare``: the shipped model's error on simulator and real-daemon data.
- ``evaluate_real``: the Table 1 timeline on the real daemon.

``python -m vadapt_lab.netap_ml --help`` lists the commands.
"""

FEATURES = ("vms", "threads", "msg_size", "interval_us")
"""Model inputs, in the order the forest's feature indices refer to."""

TARGET = "gbps"
"""Model output: aggregate throughput, Gb/s."""

PAPER_GRID = {
    "vms": (1, 2, 3, 6),
    "threads": (1, 2, 3, 6),
    "msg_size": (64, 128, 256, 512, 1024),
    "interval_us": tuple(range(50, 4001, 50)),
}
"""The paper's training grid (§3.2): 4 x 4 x 5 x 80 = 6,400 points."""
