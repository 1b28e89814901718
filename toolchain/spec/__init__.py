"""What a build is: the compatibility facts, the matrix model and its rules, cell names, Apex refs."""
