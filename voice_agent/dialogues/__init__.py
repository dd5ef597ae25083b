"""Scripted receptionist calls: a policy over the real clinic database writes the agent's turns."""
