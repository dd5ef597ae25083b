"""The shipped dental pack's own modules, for tests that drive its diary directly."""

from voice_agent.packs import pack_module
from voice_agent.scenarios import SCENARIOS_DIR

DENTAL = SCENARIOS_DIR / "dental_clinic"
clinic_db = pack_module(DENTAL, "clinic_db")
ClinicDB = clinic_db.ClinicDB
TOOL_NAMES = clinic_db.TOOL_NAMES
SERVICES = clinic_db.SERVICES
