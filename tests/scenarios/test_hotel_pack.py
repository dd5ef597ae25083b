"""The hotel_front_desk pack's backend: book, refuse a second booking, look up, change and cancel by phone
number, and set up and snapshot the diary for simulate."""

from __future__ import annotations

import datetime as dt

import pytest

from voice_agent.scenarios import load_scenario

TODAY = dt.date(2026, 12, 1)  # a Tuesday
PHONE = "07700900461"


@pytest.fixture
def hotel(tmp_path):
    scenario = load_scenario("hotel_front_desk")
    backend = scenario.open_backend(tmp_path, TODAY)
    backend.setup({})
    return backend, scenario.bind_handlers(backend)


def test_the_pack_loads_with_its_tools():
    assert load_scenario("hotel_front_desk").tool_names == [
        "check_availability", "book_room", "lookup_booking", "change_booking", "cancel_booking"]


def test_a_booking_is_made_from_the_callers_words(hotel):
    backend, tools = hotel
    booked = tools["book_room"]({"guest_name": "it's um ana ruiz", "check_in": "the ninth", "nights": "three",
                                 "room_type": "double room", "phone_number": "oh seven seven double oh nine double oh four six one"})
    assert booked["booked"] and booked["when"] == "3 nights from Wednesday, December 9th"
    assert booked["check_out"] == "Saturday, December 12th" and booked["total"] == "330 pounds"
    assert backend.snapshot() == {"bookings": {PHONE: [{"guest": "Ana Ruiz", "check_in": "2026-12-09", "nights": 3,
                                                        "check_out": "2026-12-12", "room_type": "double"}]}}


def test_a_second_booking_is_refused_when_the_number_has_one_or_the_rooms_are_full(hotel):
    backend, tools = hotel
    backend.setup({"rooms": {"family": 1}})
    assert tools["book_room"]({"guest_name": "Ana Ruiz", "check_in": "2026-12-09", "nights": 2, "room_type": "family",
                               "phone_number": PHONE})["booked"]
    again = tools["book_room"]({"guest_name": "Ana Ruiz", "check_in": "the 20th", "nights": 1, "room_type": "single",
                                "phone_number": "07700 900461"})
    assert "already a booking" in again["error"]
    full = tools["book_room"]({"guest_name": "Bo Lee", "check_in": "the tenth", "nights": 2, "room_type": "family",
                               "phone_number": "07700900462"})
    assert "no family room free" in full["error"] and "double room" in full["error"]
    assert tools["check_availability"]({"check_in": "the tenth", "nights": 1, "room_type": "family"})["available"] == []
    assert tools["check_availability"]({"check_in": "the 11th", "nights": 1})["available"][2].startswith("a family room")
    assert "in the past" in tools["book_room"]({"guest_name": "Bo Lee", "check_in": "2026-11-20", "nights": 1,
                                                "room_type": "single", "phone_number": "07700900462"})["error"]
    assert list(backend.snapshot()["bookings"]) == [PHONE]


def test_a_booking_is_looked_up_changed_and_cancelled_by_its_number(hotel):
    backend, tools = hotel
    backend.setup({"bookings": [{"phone_number": PHONE, "guest": "Ana Ruiz", "check_in": "2026-12-08", "nights": 2,
                                 "room_type": "single"}]})
    found = tools["lookup_booking"]({"phone_number": "07700 900 461"})
    assert found["guest"] == "Ana Ruiz" and found["when"] == "2 nights from Tuesday, December 8th"
    assert "0 7 7 0 0, 9 0 0 9 9 9" in tools["lookup_booking"]({"phone_number": "07700900999"})["error"]
    moved = tools["change_booking"]({"phone_number": PHONE, "new_check_in": "december 18th"})
    assert moved["changed"] and moved["when"] == "2 nights from Friday, December 18th"
    longer = tools["change_booking"]({"phone_number": PHONE, "new_check_in": "the 18th", "nights": "a week"})
    assert longer["check_out"] == "Friday, December 25th"
    assert tools["cancel_booking"]({"phone_number": "oh seven seven double oh nine double oh four six one"})["cancelled"]
    assert backend.snapshot() == {"bookings": {}}
    assert "can't find a booking" in tools["cancel_booking"]({"phone_number": PHONE})["error"]


def test_setup_and_snapshot_round_trip(hotel):
    backend, _ = hotel
    block = {"rooms": {"double": 1}, "bookings": [
        {"phone_number": "07700 900 123", "guest": "Priya Nair", "check_in": "2026-12-08", "nights": 2, "room_type": "double"},
        {"phone_number": PHONE, "guest": "Ana Ruiz", "check_in": "2026-12-20", "nights": 1, "room_type": "family"}]}
    backend.setup(block)
    snap = backend.snapshot()
    assert snap == {"bookings": {
        "07700900123": [{"guest": "Priya Nair", "check_in": "2026-12-08", "nights": 2, "check_out": "2026-12-10",
                         "room_type": "double"}],
        PHONE: [{"guest": "Ana Ruiz", "check_in": "2026-12-20", "nights": 1, "check_out": "2026-12-21",
                 "room_type": "family"}]}}
    again = load_scenario("hotel_front_desk").open_backend(backend.store, TODAY)  # the store outlives the backend
    assert again.snapshot() == snap
    again.setup({"bookings": [{"phone_number": p, **b[0]} for p, b in snap["bookings"].items()]})
    assert again.snapshot() == snap
    with pytest.raises(Exception, match="unknown key"):
        backend.setup({"guests": []})
