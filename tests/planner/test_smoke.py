from planner.errors import PlannerInputError


def test_error_names_the_argument() -> None:
    err = PlannerInputError("rate", "must be positive")
    assert err.argument == "rate"
    assert str(err) == "rate: must be positive"
