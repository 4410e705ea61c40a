"""sigmoid_gate: a chunked delta-rule recurrence for kdagen (started by `kdagen init-recurrence sigmoid_gate`).

Edit the gate and the β map, then check it with `pytest test_sigmoid_gate.py` and look at its kernels with
`kdagen plan --recurrence sigmoid_gate.py:sigmoid_gate`. Use it as an op: `op = kdagen.compile(sigmoid_gate)`, then
`o, final_state = op(q, k, v, g, beta, w, initial_state=h0, output_final_state=True)`.
"""
from kdagen import dsl


def sigmoid_gate(r: dsl.Recurrence, lower_bound: float = -5.0) -> None:
    # per token (q, k on the q/k heads; the rest on the value heads): [B, T, heads, K] or [B, T, heads]
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, beta = r.token_input("g", "K"), r.token_input("beta")
    # per value head, learned: [HV, K] (or [HV * K])
    w = r.head_param("w", "K")
    # the per-step log decay must be provably <= 0; this one lies in [lower_bound, 0]
    decay = lower_bound * dsl.sigmoid(g * dsl.exp(w))
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(beta), decay=decay,
                 scale=r.scalar("scale"))
