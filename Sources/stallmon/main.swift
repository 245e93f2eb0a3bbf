print("stallmon")
