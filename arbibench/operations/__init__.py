"""Operating long protocol runs: how far a run over a store has come (``progress``), the hours a full run will
take, projected from the model's quick card (``projection``), and one run split across machines by attack
(``split``). Each reads or fills the protocol's store; none of them is the protocol itself."""
