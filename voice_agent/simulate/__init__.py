"""`voice-agent simulate`: scripted text callers through the live call's turn logic, graded by the
state the scenario's backend is left in (`snapshot()`) and by whether every reply can be spoken.

    callfile.py    the call file's format and its parser
    runner.py      one call through Pipecat (aggregators + EngineLLMService, no audio)
    transcript.py  what a call produced (records)
    grade.py       success or the reasons for failure
    summary.py     rates, latency percentiles, the table
    readable.py    a failed call as plain text (failed/<id>.txt)
    batch.py       a call file end to end
"""
