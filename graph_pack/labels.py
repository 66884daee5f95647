"""ImageNet-1k class names, for printing an ImageNet-shaped model's top-5 as words.

``imagenet_classes.txt`` holds, one per line in class-index order, the first term of each ImageNet-1k synset's
WordNet words (as ImageNet's ``synset_words`` list gives them: class 0 is "tench, Tinca tinca" -> "tench"), taken
from the MIT-licensed ``imagenet-classes`` 0.2.1 package's ``imagenet1k_label_to_names.json``. Two names repeat
(two synsets each read "crane" and "maillot"): the index is printed beside every name.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

IMAGENET_CLASSES = 1000


@cache
def imagenet_class_names() -> tuple[str, ...]:
    names = tuple((Path(__file__).with_name("imagenet_classes.txt")).read_text(encoding="utf-8").splitlines())
    if len(names) != IMAGENET_CLASSES:
        raise RuntimeError(f"graph_pack/imagenet_classes.txt has {len(names)} names, not {IMAGENET_CLASSES}: "
                           "the installation is damaged")
    return names
