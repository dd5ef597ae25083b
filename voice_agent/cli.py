def main() -> None:
    print("voice-agent")
