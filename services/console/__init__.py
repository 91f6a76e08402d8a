"""icefjord-console: every table's freshness and health at a glance, from the control topic.

Faust agents fold ``icefjord.control`` (and the dead-letter and quarantine topics) into Faust
tables; Faust's web views serve them as a JSON API and a page, whose buttons publish the same
control events as ``icefjord control``. The folding is pure (``state.py``); the Faust wiring
(``app.py``) and the actions (``actions.py``) stay thin.
"""
