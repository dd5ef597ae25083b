"""`voice-agent callload`: concurrent Twilio-shaped phone calls against the phone app, measured
turn by turn (run.py), from callers that behave as a phone network does (caller.py)."""
