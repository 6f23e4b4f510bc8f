"""One module per graph pass, named as the seed names it; app/passes/catalogue.py lists them."""
