"""Per-node preflight health checks and the launch gate built on them.

collect (tools, parsers, collectors) -> check (pure functions over facts + thresholds) ->
verdict (versioned JSON) -> gate (all nodes at once, drain policy, go on or requeue).
"""
