"""Recovery inside the allocation: pin a failed step on its nodes, swap in spares, relaunch."""
