print("starting")
raise ValueError("boom: the model exploded")
