"""Re-applying a change onto a newer incumbent: knob lines merge, the same line conflicts."""
from agent.workspace.merge import three_way_merge

BASE = "LR = 3e-3\nBETA2 = 0.99\nDEPTH = 4\n\nprint('train')\n"


def test_changes_to_adjacent_knob_lines_merge():
    ours = BASE.replace("LR = 3e-3", "LR = 1e-3")          # the kept candidate
    theirs = BASE.replace("BETA2 = 0.99", "BETA2 = 0.95")  # the one measured against BASE
    assert three_way_merge(BASE, ours, theirs) == \
        "LR = 1e-3\nBETA2 = 0.95\nDEPTH = 4\n\nprint('train')\n"


def test_changes_to_the_same_line_conflict():
    ours = BASE.replace("LR = 3e-3", "LR = 1e-3")
    theirs = BASE.replace("LR = 3e-3", "LR = 2e-3")
    assert three_way_merge(BASE, ours, theirs) is None


def test_insertions_deletions_and_no_op_changes():
    ours = BASE.replace("DEPTH = 4\n", "")                          # a deletion
    theirs = BASE + "print('done')\n"                              # an append elsewhere
    assert three_way_merge(BASE, ours, theirs) == "LR = 3e-3\nBETA2 = 0.99\n\nprint('train')\nprint('done')\n"
    assert three_way_merge(BASE, ours, BASE) == ours               # nothing to re-apply
    assert three_way_merge(BASE, ours, ours) == ours               # the same change, once
    both = BASE.replace("\nprint", "\nimport os\nprint")
    other = BASE.replace("\nprint", "\nimport sys\nprint")
    assert three_way_merge(BASE, both, other) is None              # two insertions, one place
