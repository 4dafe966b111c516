"""Evaluation: how good a circuit is and what it costs.

``metrics`` (what ablation and attribution measure: the label readout, a decoder's judgement of
minimal pairs), ``ablate`` (faithfulness and completeness by node ablation), ``surrogate`` (edge
ablation in the linear surrogate), ``attribution`` (integrated gradients through SAE features,
the IG attribution baseline), ``faithfulness`` (the faithfulness experiment of Fig. 4), ``eap``
(EAP and EAP-IG baselines on the component graph), ``interpbench`` (the benchmark harness and its
report), ``debias`` (the Bias in Bios experiment), ``cost`` (the paper's Propositions 1 and 2),
``planted`` (a traced circuit against the toy world's planted categories), ``solver_check`` (the
solver against scikit-learn).
"""
