"""Quantized top-k SGD for PyTorch models: ``sparc-cnn`` and ``sparc-lstm``.

Modules: :mod:`.data` (digits, CIFAR-10 binary and Penn Treebank readers, per-rank slices),
:mod:`.models` (CNN, ResNet, LSTM classifier, word LM; sized by width and depth),
:mod:`.train` (the shared loop: options, build, epochs, records), :mod:`.tasks` (what the loop
trains: classification, language modelling), :mod:`.checkpoint` (resumable checkpoints),
:mod:`.cnn` and :mod:`.lstm` (the two CLIs), :mod:`.bench` (step time and overlap, dense vs
top-k), :mod:`.accuracy` (test accuracy of top-k against the dense baseline). Importing this
package imports neither torch nor MPI; the modules that need torch import it themselves.
"""

__all__: list[str] = []
